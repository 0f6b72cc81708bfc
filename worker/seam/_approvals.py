"""Approvals: a human decides whether an action an agent is about to take runs.

    decision = await askq.approve(
        askq.ToolAction(tool="drop_table", arguments={"table": "users"}, reason="cleanup"),
        seam=seam, caller=caller, timeout=600,
    )
    if decision.approved:
        run(decision.arguments)       # the agent's arguments, or the human's edit
    else:
        tell_the_model(decision.for_model())

or `@askq.require_approval(seam=..., caller=...)` on a function (sync or async): each
call asks first, then runs (with the human's edited arguments, re-validated against
the function's signature) or raises `ApprovalRejected`.

An approval is an ask: one question (header "Approval", options "Approve" and
"Reject") that carries the action (`Question.action`). So it travels the same
waterfall with the same abort, timeout, idempotency, audit trail and allowlists, and
a channel that knows nothing of approvals still shows it readably (the question's
text says who wants to run what, why, and the arguments as a JSON block). The answer
means: Approve; Reject; free text that is one JSON object: approve with these edited
arguments (checked against the action's schema when it has one, where every answer
is checked: a bad edit is refused to the human, who may answer again); any other free
text: reject, with that text as the reason the model reads.

A timeout follows `on_timeout`: "reject" (the default: the model reads that nobody
answered in time), "fail" (the ask's TIMED_OUT error) or "approve" (only when the
caller says so); a decision by the timeout is marked `defaulted`. Nothing approves by
default: the rules answerer (`askq worker auto`) approves only by a rule that names the
tool.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, NotRequired, ParamSpec, Required, TypeVar, cast

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from ..protocol._actions import (
    MAX_SCHEMA,
    MAX_TOOL,
    TOOL_PATTERN,
    TOOL_RULE,
    ToolAction,
    check_object,
    compact,
    edited_arguments,
)
from ..protocol._checks import check_text
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import (
    MAX_QUESTION,
    Answers,
    AskInput,
    Caller,
    Option,
    Question,
    validate_model,
    validation_problems,
)
from ..protocol._text import problems_message
from ..protocol._types import AbortSignal
from ._seam import Seam
from ._tool import RunId, tool_call_key


class _Blocking(typing.Protocol):
    """A `SyncSeam` as the decorator uses it (its own loop, waited on in a thread);
    named by shape, since SyncSeam's module imports this one."""

    def approve(self, action: ToolAction, caller: Caller, **options: Any) -> Decision: ...

__all__ = [
    "ApprovalRejected",
    "ApprovalTimeout",
    "Decision",
    "ToolAction",
    "approval_key",
    "approve",
    "describe",
    "require_approval",
]

QUESTION_ID = "approval"
HEADER = "Approval"
APPROVE = "Approve"
REJECT = "Reject"
# The last lines of the question: how a person edits or gives a reason, on a channel
# that offers free text ("Other…").
HOW_TO_ANSWER = (
    "To change the arguments, answer with the edited arguments as one JSON object; any"
    " other answer in words rejects it, with your words as the reason the agent reads."
)
NOBODY_ANSWERED = "nobody answered in time"

# What a timeout does: reject (the model is told nobody answered), fail TIMED_OUT, or
# approve (only when the caller says so).
ApprovalTimeout = Literal["reject", "fail", "approve"]
DecisionKind = Literal["approve", "reject", "edit"]


class Decision(BaseModel):
    """A human's decision on an action (or the timeout's, then `defaulted`).
    `arguments`: what to run it with (the action's own on approve, the human's on
    edit; None on reject). `by`: who decided, as the settlement records it."""

    model_config = ConfigDict(frozen=True)

    kind: DecisionKind
    tool: str
    arguments: dict[str, Any] | None = None
    reason: str | None = None
    by: str | None = None
    defaulted: bool = False

    @property
    def approved(self) -> bool:
        return self.kind != "reject"

    def for_model(self) -> str:
        """What the model reads about this decision, as its tool result."""
        tool = self.tool
        if self.kind == "approve":
            if self.defaulted:
                return f"Nobody answered in time; the policy for that approved running {tool}."
            return f"The user approved running {tool}."
        if self.kind == "edit":
            return (
                f"The user changed the arguments before approving {tool}, so it runs with"
                f" theirs instead of yours: {compact(self.arguments)}. Take their change"
                " into account in what you do next."
            )
        if self.defaulted:
            return (
                f"Nobody answered the request to run {tool} in time, so it did not run."
                " Do not try it again now: continue without it, or report in your final"
                " result that it is waiting for approval."
            )
        if self.reason:
            return (
                f"The user rejected running {tool}, so it did not run. Their reason:"
                f" {json.dumps(self.reason, ensure_ascii=False)}. Do not try the same call"
                " again: follow their reason, or ask the user how to proceed."
            )
        return (
            f"The user rejected running {tool}, so it did not run. They gave no reason."
            " Do not try the same call again: continue without it, or ask the user how"
            " to proceed."
        )


class ApprovalRejected(AskError):
    """An action a human rejected (code REJECTED); the message is the decision's text
    for the model, `decision` the decision itself."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(ErrorCode.REJECTED, decision.for_model())
        self.decision = decision


def describe(action: ToolAction, agent_id: str, limit: int | None = None) -> str:
    """The action as a person reads it: who wants to run what, why, the arguments as
    a JSON block, and how to answer. Within `limit` characters, the arguments cut
    short (saying so) when the whole would not fit."""
    # On one line each, so neither can forge a line of its own ("Arguments:" and a
    # harmless block above the real one): agent text is data.
    head = f"{_one_line(agent_id)} wants to run {action.tool}."
    if action.reason:
        head += f"\nReason: {_one_line(action.reason)}"
    body = json.dumps(action.arguments, indent=2, ensure_ascii=False)
    text = f"{head}\n\nArguments:\n{body}\n\n{HOW_TO_ANSWER}"
    if limit is None or len(text) <= limit:
        return text
    note = (
        f"\n… (cut short: the arguments are {len(body):,} characters; a channel that shows"
        " approvals shows them whole)"
    )
    room = max(limit - len(text) + len(body) - len(note), 0)
    return f"{head}\n\nArguments:\n{body[:room]}{note}\n\n{HOW_TO_ANSWER}"[:limit]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def approval_question(action: ToolAction, caller: Caller) -> Question:
    return Question(
        id=QUESTION_ID,
        header=HEADER,
        question=describe(action, caller.agent_id, MAX_QUESTION),
        options=[
            Option(label=APPROVE, description=f"Run {action.tool} with the arguments shown."),
            Option(label=REJECT, description="Do not run it; the agent is told it was rejected."),
        ],
        action=action,
    )


def approval_key(caller: Caller, run_id: RunId | None, tool_call_id: str) -> str:
    """The idempotency key of the approval of one tool call within its run: never the
    key of an ask of that call (both may exist), never shared by two runs (no run:
    CONFIG_ERROR, as `tool_call_key`)."""
    return "approval:" + tool_call_key(caller.agent_id, run_id, tool_call_id)


def decision_of(action: ToolAction, answers: Answers, by: str | None) -> Decision:
    """The decision an approval's answers stand for."""
    answer = answers.answers[0]
    custom = (answer.custom or "").strip()
    common: dict[str, Any] = {"tool": action.tool, "by": by, "defaulted": answers.defaulted}
    if custom and edited_arguments(custom):
        problems = action.edit_problems(custom)  # checked when answered; a stored one, again
        if problems:
            raise AskError(ErrorCode.INVALID_REQUEST, problems_message(problems))
        return Decision(kind="edit", arguments=json.loads(custom), **common)
    if custom:
        return Decision(kind="reject", reason=custom, **common)
    if answer.selected == [APPROVE]:
        return Decision(kind="approve", arguments=action.arguments, **common)
    reason = NOBODY_ANSWERED if answers.defaulted else None
    return Decision(kind="reject", reason=reason, **common)


async def approve(
    action: ToolAction | Mapping[str, Any],
    *,
    seam: Seam,
    caller: Caller,
    scope: Mapping[str, str] | None = None,
    signal: AbortSignal | None = None,
    timeout: float | None = None,
    on_timeout: ApprovalTimeout = "reject",
    idempotency_key: str | None = None,
    tool_call_id: str | None = None,
    run_id: RunId | None = None,
) -> Decision:
    """Ask a human whether `action` may run, and wait for the decision.

    Raises AskError as an ask does (ABORTED, NO_ANSWERER, TIMED_OUT with
    `on_timeout="fail"`, INVALID_REQUEST naming a bad field of the action...).
    `tool_call_id` (with `run_id`, the framework's id of the run; else the caller's
    turn) makes it idempotent per run, as the tool's calls are; or pass your own
    `idempotency_key` (unique per run)."""
    if not isinstance(action, ToolAction):
        action = validate_model(ToolAction, action)
    if on_timeout not in ("reject", "fail", "approve"):
        raise AskError(
            ErrorCode.INVALID_REQUEST,
            f"on_timeout: 'reject', 'fail' or 'approve', not {on_timeout!r}",
        )
    if tool_call_id is not None:
        if idempotency_key is not None:
            raise AskError(
                ErrorCode.INVALID_REQUEST, "tool_call_id: give it or an idempotency_key, not both"
            )
        run = run_id if run_id is not None else [caller.turn_id]
        idempotency_key = approval_key(caller, run, tool_call_id)
    label = APPROVE if on_timeout == "approve" else REJECT
    published: list[str] = []
    answers = await seam.ask(
        AskInput(questions=[approval_question(action, caller)]),
        caller,
        scope=scope,
        signal=signal,
        timeout=timeout,
        on_timeout="fail" if on_timeout == "fail" else "default",
        default=[{"id": QUESTION_ID, "selected": [label]}],
        idempotency_key=idempotency_key,
        on_published=published.append,
    )
    by = None
    if published:  # who decided: the settlement records it (the answers do not)
        settlement = await seam.settlement(published[-1])
        by = settlement.by if settlement is not None else None
    return decision_of(action, answers, by)


# --- the decorator -------------------------------------------------------------------------

P = ParamSpec("P")
R = TypeVar("R")
SeamSource = Any  # a Seam, a SyncSeam, or a callable returning one (resolved per call)


class _Signature:
    """A function's parameters as an action's arguments: their JSON schema, the
    arguments of one call as JSON, and an edit validated back into a call."""

    def __init__(self, func: Callable[..., Any], exclude: Collection[str]) -> None:
        self.name = getattr(func, "__qualname__", repr(func))
        self.signature = inspect.signature(func)
        self.exclude = frozenset(exclude)
        fields: dict[str, Any] = {}
        for name, param in self.signature.parameters.items():
            if name in self.exclude:
                continue
            hint = self._hint(func, name, param.annotation)
            if param.kind is param.VAR_POSITIONAL:
                fields[name] = NotRequired[list[hint]]  # type: ignore[valid-type]
            elif param.kind is param.VAR_KEYWORD:
                fields[name] = NotRequired[dict[str, hint]]  # type: ignore[valid-type]
            elif param.default is param.empty:
                fields[name] = Required[hint]
            else:
                fields[name] = NotRequired[hint]
        shape = cast(Any, TypedDict)(f"{getattr(func, '__name__', 'tool')}_arguments", fields)
        shape.__pydantic_config__ = ConfigDict(extra="forbid")
        try:
            self.adapter: TypeAdapter[dict[str, Any]] = TypeAdapter(shape)
            self.schema = check_object(self.adapter.json_schema(), "schema", MAX_SCHEMA)
        except AskError as exc:
            raise self._config(exc.message) from None
        except Exception as exc:  # noqa: BLE001 - pydantic cannot describe a parameter
            raise self._config(
                f"pydantic cannot describe its parameters ({type(exc).__name__}); leave out"
                " what a person need not see with exclude=[...]"
            ) from None

    def _hint(self, func: Callable[..., Any], name: str, annotation: Any) -> Any:
        """A parameter's type; a string one (`from __future__ import annotations`)
        resolved as `typing.get_type_hints` would, one parameter at a time, so an
        excluded parameter's type need not be resolvable here."""
        if annotation is inspect.Parameter.empty:
            return Any
        if not isinstance(annotation, str):
            return annotation
        try:
            return eval(annotation, getattr(func, "__globals__", {}))  # noqa: S307 - as typing does
        except Exception as exc:  # noqa: BLE001 - a name the module does not define
            raise self._config(
                f"the type of {name!r} cannot be resolved ({exc}); leave it out with"
                " exclude=[...] if a person need not see it"
            ) from None

    def _config(self, why: str) -> AskError:
        return AskError(ErrorCode.CONFIG_ERROR, f"@require_approval on {self.name}: {why}")

    def arguments(self, bound: inspect.BoundArguments) -> dict[str, Any]:
        shown = {k: v for k, v in bound.arguments.items() if k not in self.exclude}
        try:
            result: dict[str, Any] = self.adapter.dump_python(shown, mode="json", warnings=False)
        except Exception as exc:  # noqa: BLE001 - a value that has no JSON form
            raise AskError(
                ErrorCode.INVALID_REQUEST,
                f"{self.name}: an argument cannot be shown as JSON ({type(exc).__name__})",
            ) from None
        return result

    def call(
        self, decision: Decision, bound: inspect.BoundArguments
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments to run with, after `decision`."""
        if decision.kind == "reject":
            raise ApprovalRejected(decision)
        if decision.kind == "approve":
            return bound.args, bound.kwargs
        try:
            edited = self.adapter.validate_python(decision.arguments)
        except ValidationError as exc:
            why = problems_message(validation_problems(exc))
            raise ApprovalRejected(
                decision.model_copy(
                    update={
                        "kind": "reject",
                        "arguments": None,
                        "reason": f"their edited arguments do not fit {decision.tool}: {why}",
                    }
                )
            ) from None
        values: dict[str, Any] = {}
        for name, param in self.signature.parameters.items():
            if name in self.exclude:
                if name in bound.arguments:
                    values[name] = bound.arguments[name]
            elif name in edited:
                value = edited[name]
                values[name] = tuple(value) if param.kind is param.VAR_POSITIONAL else value
        new = inspect.BoundArguments(self.signature, values)  # type: ignore[arg-type,unused-ignore]
        new.apply_defaults()
        return new.args, new.kwargs


def require_approval(
    *,
    seam: SeamSource,
    caller: Caller | Callable[[], Caller],
    tool: str | None = None,
    reason: str | Callable[[dict[str, Any]], str | None] | None = None,
    scope: Mapping[str, str] | None = None,
    timeout: float | None = None,
    on_timeout: ApprovalTimeout = "reject",
    idempotency_key: Callable[[ToolAction], str | None] | None = None,
    exclude: Collection[str] = ("self", "cls"),
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Gate every call of the decorated function (sync or async) on a human's approval.

    The action is the function's name (or `tool`) and the call's arguments as JSON
    (`exclude`: parameters a person need not see, passed through as given), with the
    JSON schema of its signature, so an edit is checked before anyone runs it. On
    approve it runs with the arguments it was called with; on edit with the human's,
    validated against the signature; on reject it raises `ApprovalRejected`, whose
    message is written for the model. `seam`: a `Seam` (async functions), a `SyncSeam`
    (either), or a callable returning one per call; `caller` likewise. `reason`: text,
    or a function of the arguments. `idempotency_key`: a function of the action giving
    a key unique per run (e.g. from the tool-call id), so a restarted agent does not
    ask twice."""

    def wrap(func: Callable[P, R]) -> Callable[P, R]:
        gate = _Signature(func, exclude)
        name = check_text(
            tool or str(getattr(func, "__name__", "")),
            f"@require_approval on {gate.name}: tool",
            MAX_TOOL,
            pattern=TOOL_PATTERN,
            rule=TOOL_RULE,
            code=ErrorCode.CONFIG_ERROR,
        )

        def prepare(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[ToolAction, inspect.BoundArguments, dict[str, Any]]:
            bound = gate.signature.bind(*args, **kwargs)  # a wrong call: TypeError, as always
            bound.apply_defaults()
            arguments = gate.arguments(bound)
            why: str | None = reason(arguments) if callable(reason) else reason
            action = ToolAction(
                tool=name, arguments=arguments, reason=why, arguments_schema=gate.schema
            )
            options: dict[str, Any] = {
                "scope": scope,
                "timeout": timeout,
                "on_timeout": on_timeout,
                "idempotency_key": idempotency_key(action) if idempotency_key else None,
            }
            return action, bound, options

        def who() -> Caller:
            return caller() if callable(caller) else caller

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def gated_async(*args: Any, **kwargs: Any) -> Any:
                action, bound, options = prepare(args, kwargs)
                source = seam() if callable(seam) else seam
                if isinstance(source, Seam):
                    decision = await approve(action, seam=source, caller=who(), **options)
                else:  # a SyncSeam: its own loop, waited on in a thread
                    decision = await asyncio.to_thread(source.approve, action, who(), **options)
                call_args, call_kwargs = gate.call(decision, bound)
                return await cast(Any, func)(*call_args, **call_kwargs)

            return cast(Callable[P, R], gated_async)

        @functools.wraps(func)
        def gated(*args: Any, **kwargs: Any) -> Any:
            action, bound, options = prepare(args, kwargs)
            source: Seam | _Blocking = seam() if callable(seam) else seam
            if isinstance(source, Seam):
                raise AskError(
                    ErrorCode.CONFIG_ERROR,
                    f"@require_approval on {gate.name}: a synchronous function needs a"
                    " SyncSeam (an async Seam cannot be waited on from synchronous code)",
                )
            decision = source.approve(action, who(), **options)
            call_args, call_kwargs = gate.call(decision, bound)
            return func(*call_args, **call_kwargs)

        return cast(Callable[P, R], gated)

    return wrap
