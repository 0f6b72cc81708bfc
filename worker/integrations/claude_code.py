"""Claude Code's `AskUserQuestion`, answered through askq.

Two ways in, one conversion:

- `askq claude-code-hook`: a `PreToolUse` hook command (matcher `AskUserQuestion`) for
  Claude Code itself. It reads the hook input JSON on stdin, asks through askq, and
  writes the hook output on stdout: `permissionDecision: "allow"` with `updatedInput`
  carrying the answers, or `"deny"` with the reason.
- `AskqCanUseTool`: a `can_use_tool` callback for the Claude Agent SDK (Python) doing
  the same for SDK-driven agents (`PermissionResultAllow(updated_input=...)` or
  `PermissionResultDeny(message=...)`); its `pre_tool_use` is the same as an SDK hook
  callback, for hosts that answer through hooks.

The shapes (Claude Code 2.1.332, as bundled with claude-agent-sdk 0.2.189): the tool
input is `{questions: [{question, header, options: [{label, description, preview?}],
multiSelect}], answers?, annotations?, metadata?}`; the answers go back in the same
input as `answers: {<question text>: <label>}`, a multi-select's labels joined with
", " (a custom "Other" text as one more item; a free-text question's text as is).

askq's own question ids are derived from each question's position and text, so the
same call maps to the same ids in every process. The idempotency key is the tool-use
id within its conversation: the session (a UUID Claude Code makes per session) and the
sub-agent, whose conversation is its own; the SDK promises a tool-use id unique only
within its assistant message, and the Messages API within one conversation. So a hook
that runs again for the same call reattaches (the human is not asked twice), and
another session with the same tool-use id is asked anew. The SDK's `can_use_tool`
carries no session id: there the conversation is the adapter's `turn_id` (one per
run). A call without a session asks without a key.

What askq cannot show a human as asked (option previews, number sliders) is denied
with the reason, and so is every failure (NO_ANSWERER, ABORTED, TIMED_OUT...):
Claude reads the reason and never gets an answer nobody gave.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..answering._runtime import stop_on_signals
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import Caller, validate_model
from ..protocol._settings import Settings
from ..protocol._text import quoted, visible
from ..seam._seam import Seam
from ..seam._tool import AskUserQuestionTool, RunId, warn_unkeyed_once

if TYPE_CHECKING:
    from claude_agent_sdk import (
        HookContext,
        HookInput,
        HookJSONOutput,
        PermissionResultAllow,
        PermissionResultDeny,
        ToolPermissionContext,
    )

    from ..protocol._types import AbortSignal

log = logging.getLogger("askq.integrations.claude_code")

CLAUDE_TOOL = "AskUserQuestion"

# A question's kinds (Claude Code's extended form): "choice" (the default) picks
# options, "text" is a free-text box, "number" a slider askq has no way to show.
_KINDS = ("choice", "text")


@dataclass(frozen=True)
class ClaudeQuestions:
    """One `AskUserQuestion` input as askq's tool input, and what maps answers back."""

    tool_input: dict[str, Any]  # the input as Claude Code sent it (answers go into it)
    ask_input: dict[str, Any]  # askq's `{"questions": [...]}`
    texts: list[str]  # Claude Code's key for each question: its text
    multi: list[bool]


@dataclass(frozen=True)
class Decision:
    """What askq decided for one `AskUserQuestion` call: the input with the answers in
    it (allow), or the reason there are none (deny)."""

    updated_input: dict[str, Any] | None
    reason: str

    @property
    def allowed(self) -> bool:
        return self.updated_input is not None


def question_id(index: int, text: str) -> str:
    """askq's id for Claude Code's question `index`: stable across processes."""
    return f"q{index + 1}-{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:10]}"


def _unexpressible(where: str, why: str) -> AskError:
    return AskError(
        ErrorCode.INVALID_REQUEST,
        f"{where}: {why}; askq cannot put this question to a human as asked (ask again without it)",
    )


def from_claude(tool_input: Any) -> ClaudeQuestions:
    """Claude Code's `AskUserQuestion` input as askq's tool input. Raises
    INVALID_REQUEST naming the path of what askq cannot express; askq's own checks
    (lengths, counts, duplicates) run when it asks."""
    if not isinstance(tool_input, Mapping) or not isinstance(tool_input.get("questions"), list):
        raise AskError(ErrorCode.INVALID_REQUEST, "input: expected {questions: [...]}")
    questions: list[dict[str, Any]] = []
    texts: list[str] = []
    multi: list[bool] = []
    for qi, raw in enumerate(tool_input["questions"]):
        where = f"questions[{qi}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("question"), str):
            raise AskError(ErrorCode.INVALID_REQUEST, f"{where}.question: expected text")
        kind = raw.get("kind") or "choice"
        if kind not in _KINDS:
            raise _unexpressible(f"{where}.kind", f"a {quoted(str(kind))} question")
        options = raw.get("options") or []
        if not isinstance(options, list):
            raise AskError(ErrorCode.INVALID_REQUEST, f"{where}.options: expected a list")
        for oi, option in enumerate(options):
            if isinstance(option, Mapping) and option.get("preview"):
                raise _unexpressible(f"{where}.options[{oi}].preview", "an option preview")
        text: str = raw["question"]
        # The helper line under the question (extended form) is part of what it asks.
        helper = raw.get("description")
        shown = f"{text}\n\n{helper}" if isinstance(helper, str) and helper.strip() else text
        questions.append(
            {
                "id": question_id(qi, text),
                "question": shown,
                "header": raw.get("header"),
                "options": [
                    {"label": o.get("label"), "description": o.get("description") or ""}
                    if isinstance(o, Mapping)
                    else o
                    for o in options
                ],
                "multiSelect": bool(raw.get("multiSelect", False)),
            }
        )
        texts.append(text)
        multi.append(bool(raw.get("multiSelect", False)))
    return ClaudeQuestions(dict(tool_input), {"questions": questions}, texts, multi)


def to_claude(asked: ClaudeQuestions, answers_json: str) -> dict[str, Any]:
    """askq's answers (the tool's compact JSON) as Claude Code's updated input."""
    by_id = {a["id"]: a for a in json.loads(answers_json)["answers"]}
    answers: dict[str, str] = {}
    for question, text, multi in zip(
        asked.ask_input["questions"], asked.texts, asked.multi, strict=True
    ):
        given = by_id[question["id"]]
        selected: list[str] = given["selected"]
        custom: str | None = given.get("custom")
        if multi:  # custom text supplements the selection
            answers[text] = ", ".join(selected + ([custom] if custom else []))
        else:  # custom text overrides it
            answers[text] = custom if custom else (selected[0] if selected else "")
    return {**asked.tool_input, "answers": answers}


def already_answered(tool_input: Any) -> bool:
    """Whether something before askq (another hook, the SDK host) answered the call."""
    return isinstance(tool_input, Mapping) and bool(tool_input.get("answers"))


async def decide(
    tool: AskUserQuestionTool,
    tool_input: Any,
    caller: Caller,
    *,
    signal: AbortSignal | None = None,
    tool_use_id: str | None = None,
    conversation: RunId | None = None,
) -> Decision:
    """Ask Claude Code's questions through askq: the answers, or why there are none.
    `conversation`: what makes `tool_use_id` unique (the session and sub-agent); the
    call asks without an idempotency key without it."""
    try:
        asked = from_claude(tool_input)
    except AskError as exc:
        return Decision(None, f"askq: {exc}")
    keyed = bool(tool_use_id) and conversation is not None
    if tool_use_id and not keyed:
        warn_unkeyed_once("claude-code", "Claude Code's hook input names the session_id.")
    result = await tool.execute(
        asked.ask_input,
        caller,
        signal,
        tool_call_id=tool_use_id if keyed else None,
        run_id=conversation if keyed else None,
    )
    if result.is_error:
        return Decision(None, f"askq: {result.content}")
    return Decision(to_claude(asked, result.content), "answered through askq")


# --- the PreToolUse hook command --------------------------------------------------------


def hook_output(decision: Decision) -> dict[str, Any]:
    """The hook's stdout for Claude Code (`hookSpecificOutput` of a PreToolUse hook)."""
    specific: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow" if decision.allowed else "deny",
        "permissionDecisionReason": decision.reason,
    }
    if decision.updated_input is not None:
        specific["updatedInput"] = decision.updated_input
    return {"hookSpecificOutput": specific}


def hook_caller(
    hook_input: Mapping[str, Any], *, agent: str | None = None, turn: str | None = None
) -> Caller:
    """Who asks: the session (a sub-agent of it, owned by the session), in the turn of
    the user's prompt being processed (else the session's)."""
    session = str(hook_input.get("session_id") or "unknown")
    root = agent or f"claude-code:{session}"
    sub = hook_input.get("agent_id")
    own = f"claude-code-call-{uuid.uuid4().hex}"  # no prompt, no session: the call's own
    given = {
        "agent_id": f"{root}/{sub}" if sub else root,
        "turn_id": turn or str(hook_input.get("prompt_id") or hook_input.get("session_id") or own),
        "owner": root if sub else None,
    }
    return validate_model(Caller, given)  # a bad one is INVALID_REQUEST, so a deny


def hook_conversation(hook_input: Mapping[str, Any]) -> list[str] | None:
    """The conversation a hook's tool-use id is unique in: the session and the
    sub-agent (its conversation is its own); None without a session id."""
    session = hook_input.get("session_id")
    if not isinstance(session, str) or not session:
        return None
    sub = hook_input.get("agent_id")
    return [session, str(sub) if sub else ""]


def parse_hook_input(raw: bytes | str) -> dict[str, Any]:
    """Claude Code's hook input JSON; INVALID_REQUEST naming what is wrong."""
    try:
        hook_input = json.loads(raw)
    except ValueError as exc:  # also bytes that are not UTF-8
        raise AskError(ErrorCode.INVALID_REQUEST, f"hook input: not valid JSON ({exc})") from None
    if not isinstance(hook_input, dict):
        raise AskError(ErrorCode.INVALID_REQUEST, "hook input: expected a JSON object")
    return hook_input


async def run_hook(
    settings: Settings,
    hook_input: Mapping[str, Any],
    *,
    agent: str | None = None,
    turn: str | None = None,
    scope: Mapping[str, str] | None = None,
    timeout: float | None = None,
    signal: AbortSignal | None = None,
) -> dict[str, Any]:
    """One hook call: the hook output for Claude Code's hook input. A call for another
    tool, or one already answered, gets `{}` (no opinion). Every failure to get an
    answer, Redis out of reach included, is a deny with the reason."""
    if hook_input.get("tool_name") != CLAUDE_TOOL:
        return {}
    tool_input = hook_input.get("tool_input")
    if already_answered(tool_input):
        return {}
    try:
        caller = hook_caller(hook_input, agent=agent, turn=turn)
        route = {"client": "claude-code", "session": str(hook_input.get("session_id"))}
        async with Seam(settings=settings) as seam, seam.agent(caller.agent_id, caller.owner):
            tool = AskUserQuestionTool(seam, scope={**route, **(scope or {})}, timeout=timeout)
            decision = await decide(
                tool,
                tool_input,
                caller,
                signal=signal,
                tool_use_id=hook_input.get("tool_use_id"),
                conversation=hook_conversation(hook_input),
            )
    except AskError as exc:
        decision = Decision(None, f"askq: {exc}")
    except Exception as exc:  # noqa: BLE001 - Claude Code must get a decision, not a crash
        log.exception("claude-code-hook failed")
        why = f"the question could not be asked ({type(exc).__name__})"
        decision = Decision(None, f"askq: INTERNAL: {why}")
    return hook_output(decision)


def hook_main(settings: Settings, raw: bytes, **options: Any) -> None:
    """`askq claude-code-hook`: the hook output JSON on stdout, exit status 0. Input
    that is not a hook call exits 2 (Claude Code's "blocking error": the tool call is
    blocked and Claude reads the message on stderr)."""
    try:
        hook_input = parse_hook_input(raw)
    except AskError as exc:
        sys.stderr.write(f"askq claude-code-hook: {visible(str(exc))}\n")
        sys.exit(2)

    async def run() -> dict[str, Any]:
        return await run_hook(settings, hook_input, signal=stop_on_signals(), **options)

    sys.stdout.write(json.dumps(asyncio.run(run()), ensure_ascii=False) + "\n")


# --- the Claude Agent SDK's can_use_tool ------------------------------------------------

OtherTools = Callable[
    [str, dict[str, Any], "ToolPermissionContext"],
    Awaitable["PermissionResultAllow | PermissionResultDeny"],
]


class AskqCanUseTool:
    """A `can_use_tool` callback for `ClaudeAgentOptions`: `AskUserQuestion` is asked
    through askq; any other tool goes to `other` (your own permission callback), or is
    denied when there is none.

    The caller is `agent_id` (a sub-agent: `agent_id/<its id>`, owned by `agent_id`),
    in turn `turn_id`: set `turn_id` per user turn to abort it (`seam.abort_turn`).
    `can_use_tool` carries no session id, so the turn is also what makes a tool-use id
    unique (the idempotency key is the tool-use id within it): one per run, never a
    constant. The SDK cancelling the request (the query interrupted or closed)
    withdraws the question.
    """

    def __init__(
        self,
        tool: AskUserQuestionTool,
        *,
        agent_id: str,
        turn_id: str,
        other: OtherTools | None = None,
    ) -> None:
        self.tool = tool
        self.agent_id = agent_id
        self.turn_id = turn_id
        self.other = other

    def caller(self, sub_agent: str | None) -> Caller:
        if sub_agent:
            return Caller(
                agent_id=f"{self.agent_id}/{sub_agent}", turn_id=self.turn_id, owner=self.agent_id
            )
        return Caller(agent_id=self.agent_id, turn_id=self.turn_id)

    async def __call__(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        if tool_name != CLAUDE_TOOL:
            if self.other is not None:
                return await self.other(tool_name, tool_input, context)
            return PermissionResultDeny(message=f"no permission callback for {tool_name}")
        if already_answered(tool_input):
            return PermissionResultAllow(updated_input=tool_input)
        # The SDK's context.signal is reserved (None today): its cancellation is the
        # task being cancelled, which withdraws the question.
        signal = context.signal if _is_signal(context.signal) else None
        try:
            caller = self.caller(context.agent_id)
        except AskError as exc:  # a sub-agent id that is not text askq can keep
            return PermissionResultDeny(message=f"askq: {exc}")
        decision = await decide(
            self.tool,
            tool_input,
            caller,
            signal=signal,
            tool_use_id=context.tool_use_id,
            conversation=[self.turn_id, context.agent_id or ""],
        )
        if decision.updated_input is not None:
            return PermissionResultAllow(updated_input=decision.updated_input)
        return PermissionResultDeny(message=decision.reason)

    async def pre_tool_use(
        self, hook_input: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """The same as an SDK `PreToolUse` hook callback, for hosts that prefer hooks
        (`HookMatcher(matcher="AskUserQuestion", hooks=[adapter.pre_tool_use])`): the
        answers in `updatedInput`, or a deny with the reason."""
        raw: Mapping[str, Any] = cast("Mapping[str, Any]", hook_input)
        if raw.get("tool_name") != CLAUDE_TOOL or already_answered(raw.get("tool_input")):
            return {}
        sub = raw.get("agent_id")
        try:
            caller = self.caller(sub)
        except AskError as exc:
            return cast("HookJSONOutput", hook_output(Decision(None, f"askq: {exc}")))
        decision = await decide(
            self.tool,
            raw.get("tool_input"),
            caller,
            tool_use_id=tool_use_id or raw.get("tool_use_id"),
            conversation=hook_conversation(raw) or [self.turn_id, str(sub or "")],
        )
        return cast("HookJSONOutput", hook_output(decision))


def _is_signal(value: Any) -> bool:
    return callable(getattr(value, "is_set", None)) and callable(getattr(value, "wait", None))
