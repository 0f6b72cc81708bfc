"""An elicitation form (`requestedSchema`: a flat object of primitive properties) as
askq questions, and the answers back as content of the requested types.

| property schema                                   | question                         |
|---------------------------------------------------|----------------------------------|
| `enum`, `oneOf: [{const, title}]` (`enumNames`)   | single-select, titles as labels  |
| `type: array`, `items.enum` / `items.anyOf`       | multi-select                     |
| `boolean`                                         | Yes / No                         |
| `string` (min/maxLength, pattern, format)         | free text, checked               |
| `number` / `integer` (minimum / maximum)          | free text, parsed and checked    |

A `default` is the recommended option (first, marked " (Recommended)"), or named in a
free-text question. More than ten choices, or labels askq cannot show, become free text
checked against the choices. An optional free-text field is left out with "-".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from askq import RECOMMENDED_SUFFIX, Answer
from askq.protocol._text import cut, quoted

MAX_OPTIONS = 10
MAX_LABEL = 120
MAX_HEADER = 40
MAX_QUESTION = 2000
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
SKIP = "-"
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

Kind = Literal["choice", "multi", "boolean", "string", "number", "integer"]
Value = str | int | float | bool | list[str]


class FormError(ValueError):
    """A schema askq cannot put to a human (nested objects, unknown types)."""


@dataclass
class Field:
    name: str  # the property, as the content names it
    qid: str  # the question's id
    kind: Kind
    required: bool
    schema: Mapping[str, Any]
    choices: list[tuple[str, Any]] = field(default_factory=list)  # (label, value)
    as_text: bool = False  # choices asked as free text (too many, or unshowable labels)

    @property
    def title(self) -> str:
        return str(self.schema.get("title") or self.name)

    def question(self, message: str, problem: str | None = None) -> dict[str, Any]:
        """The askq question for this field (`problem`: why the last answer was refused)."""
        parts = [cut(message, 1200)]
        if self.schema.get("description"):
            parts.append(cut(str(self.schema["description"]), 300))
        parts.append(self._hint())
        if problem:
            parts.append(f"Your last answer was not accepted: {problem}. Please answer again.")
        options: list[dict[str, str]] = []
        if self.choices and not self.as_text:
            options = [{"label": label} for label, _ in self.choices]
        return {
            "id": self.qid,
            "header": cut(self.title, MAX_HEADER),
            "question": cut("\n\n".join(p for p in parts if p) or self.title, MAX_QUESTION),
            "options": options,
            "multiSelect": self.kind == "multi" and bool(options),
        }

    def _hint(self) -> str:
        s = self.schema
        notes: list[str] = []
        if self.as_text:
            notes.append("Answer with one of: " + ", ".join(label for label, _ in self.choices))
        if self.kind == "string":
            if "minLength" in s or "maxLength" in s:
                notes.append(f"{s.get('minLength', 0)} to {s.get('maxLength', 'any')} characters")
            if s.get("format"):
                notes.append(f"format: {s['format']}")
            if s.get("pattern"):
                notes.append(f"must match: {s['pattern']}")
        if self.kind in ("number", "integer"):
            notes.append("a whole number" if self.kind == "integer" else "a number")
            if "minimum" in s:
                notes.append(f"at least {s['minimum']}")
            if "maximum" in s:
                notes.append(f"at most {s['maximum']}")
        if self.kind == "multi":
            if "minItems" in s:
                notes.append(f"choose at least {s['minItems']}")
            if "maxItems" in s:
                notes.append(f"choose at most {s['maxItems']}")
        if "default" in s and self.kind in ("string", "number", "integer"):
            notes.append(f"default: {s['default']}")
        if not self.required and (self.kind in ("string", "number", "integer") or self.as_text):
            notes.append(f'optional: answer "{SKIP}" to leave it out')
        return "(" + "; ".join(notes) + ")" if notes else ""

    def value(self, answer: Answer) -> tuple[bool, Value | None, str | None]:
        """(ok, value or None when left out, problem) for this field's answer."""
        if self.kind == "multi":
            return self._multi(answer)
        if self.choices:
            return self._one_choice(answer)
        text = (answer.custom or "").strip()
        if not text or text == SKIP:
            if self.required:
                return False, None, "an answer is required"
            return True, None, None
        if self.kind == "string":
            problem = _check_string(text, self.schema)
            return problem is None, text if problem is None else None, problem
        return _number(text, self.kind, self.schema)

    def _match(self, text: str) -> Any:
        wanted = text.strip().casefold()
        for label, value in self.choices:
            if wanted in (label.casefold(), _bare(label).casefold(), str(value).casefold()):
                return value
        raise KeyError(text)

    def _one_choice(self, answer: Answer) -> tuple[bool, Value | None, str | None]:
        picked = answer.custom if answer.custom is not None else None
        if picked is None and answer.selected:
            picked = answer.selected[0]
        if picked is None or picked.strip() in ("", SKIP):
            if self.required:
                return False, None, "an answer is required"
            return True, None, None
        try:
            value = self._match(picked)
        except KeyError:
            return False, None, f"{quoted(picked)} is not one of the choices"
        return True, value, None

    def _multi(self, answer: Answer) -> tuple[bool, Value | None, str | None]:
        picked = list(answer.selected)
        if answer.custom and answer.custom.strip() not in ("", SKIP):
            picked += [part for part in answer.custom.split(",") if part.strip()]
        values: list[str] = []
        for text in picked:
            try:
                value = str(self._match(text))
            except KeyError:
                return False, None, f"{quoted(text)} is not one of the choices"
            if value not in values:
                values.append(value)
        low, high = self.schema.get("minItems"), self.schema.get("maxItems")
        if isinstance(low, int) and len(values) < low:
            return False, None, f"choose at least {low}"
        if isinstance(high, int) and len(values) > high:
            return False, None, f"choose at most {high}"
        if not values and not self.required:
            return True, None, None
        return True, values, None


def _bare(label: str) -> str:
    return label.removesuffix(RECOMMENDED_SUFFIX)


def _check_string(text: str, schema: Mapping[str, Any]) -> str | None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        return f"must be at least {low} characters"
    if isinstance(high, int) and len(text) > high:
        return f"must be at most {high} characters"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, text) is None:
                return f"must match {pattern}"
        except re.error:
            pass  # a pattern Python cannot read is not the human's fault
    fmt = schema.get("format")
    if fmt == "email" and not EMAIL.match(text):
        return "must be an email address"
    if fmt == "uri":
        parts = urlsplit(text)
        if not parts.scheme or not (parts.netloc or parts.path):
            return "must be a URI (e.g. https://example.com/)"
    if fmt == "date":
        try:
            date.fromisoformat(text)
        except ValueError:
            return "must be a date, YYYY-MM-DD"
    if fmt == "date-time":
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return "must be a date and time, e.g. 2026-12-01T15:30:00Z"
    return None


def _number(
    text: str, kind: Kind, schema: Mapping[str, Any]
) -> tuple[bool, Value | None, str | None]:
    number: int | float
    try:
        number = int(text) if kind == "integer" else float(text)
    except ValueError:
        return False, None, "must be a whole number" if kind == "integer" else "must be a number"
    if not math.isfinite(number):
        return False, None, "must be a finite number"
    if kind == "number" and float(number).is_integer() and "." not in text and "e" not in text:
        number = int(number)
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, int | float) and number < low:
        return False, None, f"must be at least {low}"
    if isinstance(high, int | float) and number > high:
        return False, None, f"must be at most {high}"
    return True, number, None


def _titled(items: Any) -> list[tuple[str, Any]]:
    """[{const, title}] -> (title, const)."""
    if not isinstance(items, list) or not items:
        raise FormError("oneOf/anyOf must list {const, title} choices")
    out = []
    for item in items:
        if not isinstance(item, Mapping) or "const" not in item:
            raise FormError("oneOf/anyOf must list {const, title} choices")
        out.append((str(item.get("title") or item["const"]), item["const"]))
    return out


def _choices(schema: Mapping[str, Any]) -> list[tuple[str, Any]] | None:
    if "oneOf" in schema:
        return _titled(schema["oneOf"])
    if "anyOf" in schema:
        return _titled(schema["anyOf"])
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise FormError("enum must list its values")
        names = schema.get("enumNames")
        if isinstance(names, list) and len(names) == len(values):
            return [(str(n), v) for n, v in zip(names, values, strict=True)]
        return [(str(v), v) for v in values]
    return None


def _recommend(choices: list[tuple[str, Any]], default: Any) -> list[tuple[str, Any]]:
    """The default first, marked recommended (askq's convention)."""
    defaults = default if isinstance(default, list) else [default]
    marked = [(label + RECOMMENDED_SUFFIX, v) for label, v in choices if v in defaults]
    return marked + [(label, v) for label, v in choices if v not in defaults]


def _showable(choices: list[tuple[str, Any]]) -> bool:
    labels = [label for label, _ in choices]
    return (
        len(choices) <= MAX_OPTIONS
        and len(set(labels)) == len(labels)
        and all(0 < len(label) <= MAX_LABEL for label in labels)
    )


def form_fields(schema: Mapping[str, Any]) -> list[Field]:
    """The fields of a requested schema (FormError naming what askq cannot ask)."""
    properties = schema.get("properties")
    if schema.get("type", "object") != "object" or not isinstance(properties, Mapping):
        raise FormError("requestedSchema must be an object with properties")
    if not properties:
        raise FormError("requestedSchema has no properties to ask for")
    required = schema.get("required") or []
    fields: list[Field] = []
    used: set[str] = set()
    for index, (name, prop) in enumerate(properties.items()):
        if not isinstance(prop, Mapping):
            raise FormError(f"property {name!r} is not a schema")
        qid = name if ID.match(name) and name not in used else f"field{index}"
        while qid in used:  # a property named like another's stand-in id
            qid += "_"
        used.add(qid)
        kind: Kind
        choices = _choices(prop)
        ptype = prop.get("type")
        if ptype == "array":
            items = prop.get("items")
            if not isinstance(items, Mapping) or (item_choices := _choices(items)) is None:
                raise FormError(f"property {name!r}: an array must list its choices (items.enum)")
            kind, choices = "multi", item_choices
        elif choices is not None:
            kind = "choice"
        elif ptype == "boolean":
            kind, choices = "boolean", [("Yes", True), ("No", False)]
        elif ptype in ("string", "number", "integer"):
            kind = ptype
        else:
            raise FormError(f"property {name!r}: type {ptype!r} is not a primitive askq can ask")
        if choices is not None and "default" in prop:
            choices = _recommend(choices, prop["default"])
        f = Field(name, qid, kind, name in required, prop, choices or [])
        f.as_text = bool(f.choices) and not _showable(f.choices)
        fields.append(f)
    return fields
