"""The `ask_user_question` tool as the model sees it.

The tool only converts: model arguments -> an ask on the seam (with the exact caller
and the turn's abort signal), and the accepted answers -> compact JSON. Failures come
back as an error tool result the model reads, never as an exception into the agent
loop. The schema is generated from the models that validate the input, once, and is
byte-identical across calls and processes (it sits in the model's cached prefix).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from ..protocol._checks import check_text
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import AskInput, Caller
from ..protocol._text import quoted

if TYPE_CHECKING:
    from ..protocol._types import AbortSignal, OnTimeout
    from ._seam import Seam

log = logging.getLogger("askq.tool")

TOOL_NAME = "ask_user_question"

TOOL_DESCRIPTION = (
    "Ask the user to confirm, choose, or supply missing information, and wait for the"
    " answer. Call it when you cannot continue correctly without a human decision: a"
    " destructive or irreversible step, a choice between approaches the user cares"
    " about, or a fact only the user knows. Do not call it for things you can find out"
    " yourself. Send one or more questions; give each a stable id (echoed in the"
    " answer), a short header, and options. Put the recommended option first and end"
    " its label with ' (Recommended)'. Set multiSelect when several options may be"
    " chosen; leave options empty for a free-text question. The result is JSON:"
    ' {"answers":[{"id":...,"selected":[labels],"custom":text}]}; custom is free text'
    " the user typed (it supplements selected for multi-select, overrides it for"
    " single-select). The call fails if no answerer is available, if the turn is"
    " aborted, or if you are a sub-agent (then put your open questions in your final"
    " result instead)."
)


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """Resolve `$ref`s and drop `title`s: a flat schema reads better to a model and
    costs fewer tokens. Deterministic, so the output is byte-stable."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
            return {k: walk(v) for k, v in node.items() if k not in ("title", "$defs")}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


@cache
def input_schema_json() -> str:
    """The input schema as compact JSON text: the exact bytes the model sees."""
    schema = _inline(AskInput.model_json_schema(by_alias=True, mode="validation"))
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def input_schema() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(input_schema_json())
    return result


RunId = str | Sequence[str]


def tool_call_key(agent_id: str, run_id: RunId | None, tool_call_id: str) -> str:
    """The idempotency key of one tool call: the agent's call `tool_call_id` within the
    run `run_id` (an id, or the ids that together name the run).

    A tool-call id is unique only within its run: a test model's `call_1` is in every
    run, and a provider promises its ids unique within one conversation. A key built
    from it alone is shared by two runs, and the second gets the first one's answer
    without anyone being asked. So there is no key without a run: a missing or empty
    `run_id` is refused (CONFIG_ERROR), never replaced by something two runs share.
    A malformed call id is INVALID_REQUEST naming `tool_call_id`."""
    check_text(tool_call_id, "tool_call_id", 256)
    parts = [run_id] if isinstance(run_id, str) else list(run_id or [])
    if not parts or not all(isinstance(p, str) for p in parts) or not any(parts):
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"tool call {quoted(tool_call_id)}: no id unique to its run, so no idempotency key"
            " (a tool-call id alone is shared by every run that repeats it)",
        )
    for part in parts:
        if part:
            check_text(part, "run id", 256)
    # ASCII JSON: unambiguous however the ids are spelled ("a:b" + "c" is not "a" + "b:c").
    body = json.dumps([agent_id, *parts, tool_call_id], separators=(",", ":"))
    return "tool-call:" + hashlib.sha256(body.encode()).hexdigest()[:40]


_warned: set[str] = set()


def warn_unkeyed_once(integration: str, how: str) -> None:
    """Say once per process that `integration` asks without an idempotency key (it found
    no id unique to the run), and `how` to give it one."""
    if integration in _warned:
        return
    _warned.add(integration)
    log.warning(
        "%s: no id unique to this run, so ask_user_question asks without an idempotency"
        " key: a tool call run again (a restarted agent) asks the human again. %s",
        integration,
        how,
    )


@dataclass(frozen=True)
class ToolResult:
    """What goes back to the model: compact JSON answers, or an error it can read."""

    content: str
    is_error: bool = False
    code: ErrorCode | None = None

    def anthropic(self, tool_use_id: str) -> dict[str, Any]:
        """As an Anthropic `tool_result` content block."""
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": self.content,
        }
        if self.is_error:
            block["is_error"] = True
        return block

    def openai(self, tool_call_id: str) -> dict[str, Any]:
        """As an OpenAI `tool` message."""
        return {"role": "tool", "tool_call_id": tool_call_id, "content": self.content}


class AskUserQuestionTool:
    """The tool adapter over a seam. `scope` routes every ask of this tool (tenant,
    session...); the caller and signal come per call."""

    name = TOOL_NAME
    description = TOOL_DESCRIPTION

    def __init__(
        self,
        seam: Seam,
        *,
        scope: Mapping[str, str] | None = None,
        timeout: float | None = None,
        on_timeout: OnTimeout = "fail",
    ) -> None:
        """`timeout`/`on_timeout`: the default policy of every call (see `Seam.ask`)."""
        self.seam = seam
        self.scope = dict(scope or {})
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout

    @property
    def input_schema(self) -> dict[str, Any]:
        return input_schema()

    def anthropic(self) -> dict[str, Any]:
        """The tool definition in the Anthropic Messages API shape."""
        return {"name": self.name, "description": self.description, "input_schema": input_schema()}

    def openai(self) -> dict[str, Any]:
        """The tool definition in the OpenAI function-tool shape."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": input_schema(),
            },
        }

    async def execute(
        self,
        args: Any,
        caller: Caller,
        signal: AbortSignal | None = None,
        *,
        tool_call_id: str | None = None,
        run_id: RunId | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_timeout: OnTimeout | None = None,
        default: Any = None,
    ) -> ToolResult:
        """Run one tool call. Never raises for anything the model should hear about.

        `tool_call_id` makes the call idempotent within its run: an agent that restarts
        and runs the same tool call again gets the same question's answer, without
        asking twice, and another run with the same call id is asked anew. The run is
        `run_id` (the framework's id for it), else the caller's turn (then one turn per
        run). `idempotency_key`: a key the caller built itself (unique per run), instead.
        `timeout`, `on_timeout`, `default` override the tool's policy for this call."""
        try:
            if tool_call_id is not None:
                if idempotency_key is not None:
                    raise AskError(
                        ErrorCode.INVALID_REQUEST,
                        "tool_call_id: give it or an idempotency_key, not both",
                    )
                run = run_id if run_id is not None else [caller.turn_id]
                idempotency_key = tool_call_key(caller.agent_id, run, tool_call_id)
            answers = await self.seam.ask(
                args,
                caller,
                scope=self.scope,
                signal=signal,
                timeout=timeout if timeout is not None else self.timeout,
                on_timeout=on_timeout or self.on_timeout,
                default=default,
                idempotency_key=idempotency_key,
            )
        except AskError as exc:
            return ToolResult(content=str(exc), is_error=True, code=exc.code)
        except Exception as exc:  # noqa: BLE001 - the agent loop must get a tool result
            log.exception("ask_user_question failed")
            return ToolResult(
                content=f"INTERNAL: the question could not be asked ({type(exc).__name__})",
                is_error=True,
                code=ErrorCode.INTERNAL,
            )
        return ToolResult(content=answers.to_json())
