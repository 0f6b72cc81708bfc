"""An action an agent is about to take, as an approval carries it (`askq.approvals`).

`ToolAction` rides on the one question of an approval (`Question.action`), so it
travels the waterfall as every question does: in the request's payload, its offers,
its audit trail. It is checked where it is made, each failure an INVALID_REQUEST
naming the field (`action.arguments.path: ...`): the arguments are one JSON object of
bounded size whose values are JSON (no NaN, no datetime, no non-text keys).

What a human answers to an approval is checked here too, where `parse_answers` checks
every answer: free text that starts with `{` is an edit of the arguments, so it must be
one JSON object that fits the action's schema, and a human who typed a bad edit is told
what is wrong and may answer again (rather than the agent getting a rejection nobody
meant).

The schema check is a small subset of JSON Schema (`schema_problems`), not a
dependency: the keywords tool schemas use (pydantic's and the frameworks'): type,
enum, const, properties, required, additionalProperties, items, prefixItems, the
length, size and range bounds, pattern, anyOf / oneOf / allOf and local `$ref`s.
Other keywords are not checked; the decorator re-validates an edit with pydantic
against the function's own signature before it runs anything.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._checks import check_text
from ._errors import AskError, ErrorCode
from ._text import cut, quoted, utf8_problem

MAX_TOOL = 128
TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")
TOOL_RULE = "a tool name (1-128 letters, digits, '_', '.', ':', '/' or '-')"
MAX_REASON = 1000
MAX_ARGUMENTS = 16_000  # characters of the arguments as compact JSON
MAX_SCHEMA = 16_000
MAX_DEPTH = 32  # nesting of arguments and schemas
EDIT_HINT = "start it with '{' only to give edited arguments as one JSON object"


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _key(path: str, key: str) -> str:
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}", key)
    return f"{path}.{key}" if plain else f"{path}[{quoted(key, 40)}]"


def json_problem(value: Any, path: str, depth: int = 0) -> str | None:
    """Why `value` is not plain JSON (naming the path), or None: dicts with text keys,
    lists, text, finite numbers, booleans and null, nested at most MAX_DEPTH deep."""
    if depth > MAX_DEPTH:
        return f"{path}: nested more than {MAX_DEPTH} deep"
    if value is None or isinstance(value, (bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value} is not a JSON number"
    if isinstance(value, str):
        why = utf8_problem(value)
        return f"{path}: {why}" if why else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: a key must be text, not {type(key).__name__}"
            if (why := utf8_problem(key)) is not None:
                return f"{path}: a key is {why}"
            if (problem := json_problem(item, _key(path, key), depth + 1)) is not None:
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if (problem := json_problem(item, f"{path}[{i}]", depth + 1)) is not None:
                return problem
        return None
    return f"{path}: a {type(value).__name__} is not a JSON value"


def check_object(value: Any, what: str, limit: int) -> dict[str, Any]:
    """`value` as a JSON object of at most `limit` characters (compact), or INVALID_REQUEST."""
    if not isinstance(value, Mapping):
        raise AskError(
            ErrorCode.INVALID_REQUEST, f"{what}: must be a JSON object, not {type(value).__name__}"
        )
    if (problem := json_problem(value, what)) is not None:
        raise AskError(ErrorCode.INVALID_REQUEST, problem)
    size = len(compact(value))
    if size > limit:
        raise AskError(
            ErrorCode.INVALID_REQUEST,
            f"{what}: {size:,} characters as JSON, more than the {limit:,} allowed",
        )
    return dict(value)


class ToolAction(BaseModel):
    """A tool call waiting for a human's approval: the tool, its arguments (a JSON
    object), why the agent wants it (optional), and the JSON schema of its arguments
    (optional: an edit is checked against it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(description="The tool's name.")
    arguments: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None
    arguments_schema: dict[str, Any] | None = None

    @field_validator("tool", mode="before")
    @classmethod
    def _tool(cls, value: Any) -> Any:
        return check_text(value, "action.tool", MAX_TOOL, pattern=TOOL_PATTERN, rule=TOOL_RULE)

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, value: Any) -> Any:
        return None if value is None else check_text(value, "action.reason", MAX_REASON)

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments(cls, value: Any) -> Any:
        return check_object(value, "action.arguments", MAX_ARGUMENTS)

    @field_validator("arguments_schema", mode="before")
    @classmethod
    def _schema(cls, value: Any) -> Any:
        return None if value is None else check_object(value, "action.arguments_schema", MAX_SCHEMA)

    def matches(self, tool: str, arguments: Mapping[str, str]) -> bool:
        """Whether a rule's patterns (shell-style, on the whole text) match: `tool` on
        the tool's name, each of `arguments` on that argument's value (a string as it
        is, any other value as its compact JSON; a missing argument never matches)."""
        if not fnmatchcase(self.tool, tool):
            return False
        for key, pattern in arguments.items():
            if key not in self.arguments:
                return False
            value = self.arguments[key]
            if not fnmatchcase(value if isinstance(value, str) else compact(value), pattern):
                return False
        return True

    def edit_problems(self, text: str) -> list[str]:
        """What is wrong with `text` as edited arguments (empty: it is fine)."""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return [f"edited arguments: not valid JSON ({cut(str(exc), 80)}); {EDIT_HINT}"]
        if not isinstance(value, dict):
            return [f"edited arguments: must be one JSON object, not {type(value).__name__}"]
        if (problem := json_problem(value, "edited arguments")) is not None:
            return [problem]
        if self.arguments_schema is None:
            return []
        return schema_problems(value, self.arguments_schema, "edited arguments")


def edited_arguments(text: str | None) -> bool:
    """Whether an answer's free text is meant as edited arguments (not a reason)."""
    return text is not None and text.lstrip().startswith("{")


# --- the JSON Schema subset ---------------------------------------------------------------

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def schema_problems(value: Any, schema: Any, path: str) -> list[str]:
    """Where `value` breaks `schema` (the subset in the module docstring), each problem
    naming its path; empty when it fits."""
    root = schema if isinstance(schema, dict) else {}
    return _check(value, schema, path, root, 0)


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> Any:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node if node is not None else True  # an unknown reference is not checked


def _check(value: Any, schema: Any, path: str, root: dict[str, Any], depth: int) -> list[str]:
    if schema is False:
        return [f"{path}: not allowed"]
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return []  # True (anything goes), or nested deeper than is checked
    if "$ref" in schema:
        return _check(value, _resolve(schema, root), path, root, depth + 1)
    problems: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return [f"{path}: must be {' or '.join(map(str, kinds))}"]
    if "enum" in schema and value not in schema["enum"]:
        shown = ", ".join(compact(v) for v in schema["enum"][:10])
        problems.append(f"{path}: must be one of {cut(shown, 200)}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{path}: must be {cut(compact(schema['const']), 80)}")
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            fits = sum(not _check(value, b, path, root, depth + 1) for b in branches)
            if fits == 0 or (key == "oneOf" and fits > 1):
                problems.append(f"{path}: fits none of the allowed forms")
    for branch in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
        problems += _check(value, branch, path, root, depth + 1)
    if isinstance(value, dict):
        problems += _object(value, schema, path, root, depth)
    elif isinstance(value, list):
        problems += _array(value, schema, path, root, depth)
    elif isinstance(value, str):
        problems += _string(value, schema, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        problems += _number(value, schema, path)
    return problems


def _object(
    value: dict[str, Any], schema: dict[str, Any], path: str, root: dict[str, Any], depth: int
) -> list[str]:
    problems = []
    found = schema.get("properties")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in schema.get("required", []) if isinstance(schema.get("required"), list) else []:
        if name not in value:
            problems.append(f"{_key(path, str(name))}: missing")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        where = _key(path, key)
        if key in properties:
            problems += _check(item, properties[key], where, root, depth + 1)
        elif extra is False:
            problems.append(f"{where}: not an argument of this tool")
        else:
            problems += _check(item, extra, where, root, depth + 1)
    return problems


def _array(
    value: list[Any], schema: dict[str, Any], path: str, root: dict[str, Any], depth: int
) -> list[str]:
    problems = []
    if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
        problems.append(f"{path}: at least {schema['minItems']} items")
    if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
        problems.append(f"{path}: at most {schema['maxItems']} items")
    found = schema.get("prefixItems")
    prefix: list[Any] = found if isinstance(found, list) else []
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else schema.get("items", True)
        problems += _check(item, sub, f"{path}[{i}]", root, depth + 1)
    return problems


def _string(value: str, schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
        problems.append(f"{path}: at least {schema['minLength']} characters")
    if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
        problems.append(f"{path}: at most {schema['maxLength']} characters")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, value) is None:
                problems.append(f"{path}: does not match {quoted(pattern, 60)}")
        except re.error:
            pass  # a pattern Python cannot read is not checked
    return problems


def _number(value: float, schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    bounds: list[tuple[str, Callable[[float], bool], str]] = [
        ("minimum", lambda b: value >= b, "at least"),
        ("maximum", lambda b: value <= b, "at most"),
        ("exclusiveMinimum", lambda b: value > b, "more than"),
        ("exclusiveMaximum", lambda b: value < b, "less than"),
    ]
    for key, fits, words in bounds:
        bound = schema.get(key)
        if isinstance(bound, (int, float)) and not isinstance(bound, bool) and not fits(bound):
            problems.append(f"{path}: must be {words} {bound}")
    return problems
