"""The contract in one place: what the model sends, what it gets back, who is asking,
and what answerers see.

Field validation (types, lengths, counts) is pydantic's; the cross-field rules (unique
ids and labels, answers that fit their questions) are checked here by hand so every
violation can name its exact path, e.g. `questions[1].options[2].label`.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic.json_schema import SkipJsonSchema

from ._actions import ToolAction, edited_arguments
from ._attribution import answered_by
from ._checks import MAX_CALLER_ID, check_text
from ._errors import AskError, ErrorCode
from ._reasons import cancelled_because, why_cancelled
from ._text import error_message, problems_message, quoted

# Documented limits (README, "Limits"). They keep a question readable on every channel
# (a Slack section block holds 3,000 characters) and a request small in Redis.
MAX_QUESTIONS = 8
MAX_OPTIONS = 10
MAX_ID = 64
MAX_HEADER = 40
MAX_QUESTION = 2000
MAX_LABEL = 120
MAX_DESCRIPTION = 500
MAX_CUSTOM = 4000
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
RECOMMENDED_SUFFIX = " (Recommended)"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Option(_Strict):
    label: str = Field(
        min_length=1,
        max_length=MAX_LABEL,
        description="What the user picks; echoed verbatim in `selected`.",
    )
    description: str = Field(
        default="", max_length=MAX_DESCRIPTION, description="What choosing it means."
    )


class Question(_Strict):
    id: str = Field(
        min_length=1,
        max_length=MAX_ID,
        pattern=ID_PATTERN,
        description="Stable id, echoed verbatim in the answer.",
    )
    question: str = Field(min_length=1, max_length=MAX_QUESTION, description="The prompt.")
    header: str = Field(
        min_length=1, max_length=MAX_HEADER, description="A short chip label, e.g. 'Confirm'."
    )
    options: list[Option] = Field(
        default_factory=list,
        max_length=MAX_OPTIONS,
        description="Choices, recommended first with ' (Recommended)' at the end of its"
        " label. Leave empty for a free-text question.",
    )
    multi_select: bool = Field(
        default=False, alias="multiSelect", description="Allow choosing several options."
    )
    # An approval's action (askq.approvals): set by `askq.approve`, never by the model
    # (not in the tool's schema; `parse_input` refuses it), and left out of a dump when
    # unset, so a question without one is the same JSON as before it existed.
    action: SkipJsonSchema[ToolAction | None] = None

    @model_serializer(mode="wrap")
    def _unset_action_left_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Not `Field(exclude_if=...)`: that needs pydantic 2.12, askq takes 2.6.
        data = handler(self)
        if self.action is None and isinstance(data, dict):
            data.pop("action", None)
        return data

    @property
    def labels(self) -> list[str]:
        return [o.label for o in self.options]

    @property
    def recommended(self) -> list[str]:
        """Labels marked recommended; the first option when none is."""
        marked = [label for label in self.labels if label.endswith(RECOMMENDED_SUFFIX)]
        if marked:
            return marked if self.multi_select else marked[:1]
        return self.labels[:1]


class AskInput(_Strict):
    """Questions to put to the user; they are answered together."""

    questions: list[Question] = Field(
        min_length=1,
        max_length=MAX_QUESTIONS,
        description="One or more questions; the answers come back in this order.",
    )


class Answer(_Strict):
    # Bounded like the questions they answer, so a bad answer is refused in a few words.
    id: str = Field(min_length=1, max_length=MAX_ID)
    selected: list[str] = Field(default_factory=list, max_length=MAX_OPTIONS)
    custom: str | None = Field(default=None, max_length=MAX_CUSTOM)


class Answers(_Strict):
    """The tool output: `{"answers": [...]}`, one per question, in question order.
    `defaulted`: no human answered; these are the defaults the ask declared for its
    timeout (the model must be able to tell them from a human's answer)."""

    answers: list[Answer]
    defaulted: bool = False

    def to_json(self) -> str:
        """The exact compact JSON the model reads (`custom` omitted when unused)."""
        body = [
            {"id": a.id, "selected": a.selected}
            | ({"custom": a.custom} if a.custom is not None else {})
            for a in self.answers
        ]
        return compact_json({"answers": body} | ({"defaulted": True} if self.defaulted else {}))


class Caller(_Strict):
    """Who is asking: the exact agent, its turn, and the agent that owns it (if any).

    Each id is 1-200 characters of valid Unicode text: anything else is refused as
    the caller is made, with INVALID_REQUEST naming the field (an AskError, like every
    refusal of askq's, not pydantic's ValidationError)."""

    agent_id: str = Field(min_length=1, max_length=MAX_CALLER_ID)
    turn_id: str = Field(min_length=1, max_length=MAX_CALLER_ID)
    owner: str | None = Field(default=None, min_length=1, max_length=MAX_CALLER_ID)

    @field_validator("agent_id", "turn_id", "owner", mode="before")
    @classmethod
    def _checked(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.field_name == "owner":
            return None
        return check_text(value, str(info.field_name), MAX_CALLER_ID)


class AskRequest(_Strict):
    """A validated ask as it travels through Redis (the `payload` of the request).
    `idempotency`: the SHA-256 of the caller's idempotency key, if it gave one (the
    request's index key, `Keys.idem`)."""

    id: str
    questions: list[Question]
    scope: dict[str, str] = Field(default_factory=dict)
    caller: Caller
    created_ms: int
    idempotency: str | None = None
    # W3C traceparent of the caller's `askq.ask` span (the 'otel' extra), so the
    # answering side's spans join the agent's trace.
    trace: str | None = Field(default=None, max_length=512)


class RequestState(StrEnum):
    """Where a request is in its state machine (lua/README.md; DESIGN §4)."""

    # Offered to the groups of one tier; none of them holds a claim yet.
    OFFERED = "OFFERED"
    # One or more groups of the tier hold a claim: their humans may be looking at it.
    CLAIMED = "CLAIMED"
    # A valid answer was accepted (or the ask's timeout settled it with its default).
    ANSWERED = "ANSWERED"
    # Nobody could answer it (NO_ANSWERER), or Redis lost it.
    FAILED = "FAILED"
    # Withdrawn: the turn was aborted, the caller gave up or is gone, or it timed out.
    CANCELLED = "CANCELLED"


# The states a request never leaves (common.lua's TERMINAL).
TERMINAL: frozenset[RequestState] = frozenset(
    {RequestState.ANSWERED, RequestState.FAILED, RequestState.CANCELLED}
)
SettlementState = Literal["ANSWERED", "FAILED", "CANCELLED"]


class Settlement(BaseModel):
    """The one value ever written to a request's reply key."""

    state: SettlementState
    answers: list[Answer] | None = None
    code: ErrorCode | None = None
    message: str | None = None
    by: str | None = None
    defaulted: bool | None = None  # answered by the ask's timeout default, not a human

    def result(self) -> Answers:
        """The answers, or the AskError this settlement stands for."""
        if self.state == "ANSWERED" and self.answers is not None:
            return Answers(answers=self.answers, defaulted=bool(self.defaulted))
        raise AskError(self.code or ErrorCode.INTERNAL, self.message or "request failed")


class Offer(_Strict):
    """What an answerer sees: one request offered to its group at one tier."""

    request_id: str
    group: str
    tier: int
    offer_id: str  # the stream entry of this offer
    questions: list[Question]
    scope: dict[str, str]
    caller: Caller
    created_ms: int
    trace: str | None = None  # the request's traceparent (see AskRequest.trace)


class Retraction(_Strict):
    """A question an answerer showed is no longer its to answer: it settled (ANSWERED,
    FAILED, CANCELLED) or moved on to another tier (OFFERED: escalated, released)."""

    request_id: str
    state: RequestState
    code: str | None = None
    by: str | None = None
    cause: str | None = None  # why it was cancelled (a `CancelReason`)

    @property
    def why_cancelled(self) -> str | None:
        """For a cancellation, what happened (`the turn was aborted`, `the caller is
        gone`, `the caller withdrew the question`, `the ask timed out`), if known."""
        return why_cancelled(self.cause, self.code) if self.state == "CANCELLED" else None

    @property
    def reason(self) -> str:
        if self.state == "ANSWERED":  # for a person: "answered in Slack by bob"
            return answered_by(self.by) if self.by else "answered elsewhere"
        if self.state == "CANCELLED":
            return cancelled_because(self.cause, self.code)
        if self.state == "FAILED":
            return "no longer pending"
        return "escalated to another answerer"


class RequestStatus(BaseModel):
    """One request as `askq status` shows it."""

    id: str
    state: RequestState
    tier: int | None
    undecided: list[str]
    claimers: list[str]
    header: str
    agent: str
    turn: str
    age_seconds: float
    by: str = ""
    code: str = ""


class GroupStatus(BaseModel):
    """One answerer group as `askq status` shows it."""

    name: str
    priority: int
    kind: str = ""
    scope: dict[str, str] = {}
    live_consumers: int
    pending: int


class Status(BaseModel):
    groups: list[GroupStatus]
    requests: list[RequestStatus]


def scope_matches(selector: dict[str, str], scope: dict[str, str]) -> bool:
    """A group's scope selector accepts a request when every selector key is in the
    request's scope with a matching value (shell-style patterns: `acme-*`)."""
    return all(
        key in scope and fnmatchcase(scope[key], pattern) for key, pattern in selector.items()
    )


def parse_selector(key: str, where: str) -> dict[str, str]:
    """A route's key as a channel's routes setting writes it — `"*"` (every scope) or
    `key=pattern[,key=pattern...]` — as the selector `scope_matches` takes; a malformed
    one is a CONFIG_ERROR naming `where` (the setting and the key)."""
    if key == "*":
        return {}
    selector: dict[str, str] = {}
    for pair in key.split(","):
        name, sep, pattern = pair.strip().partition("=")
        if not sep or not name.strip() or not pattern.strip():
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f'{where}: a key is "*" or key=pattern[,key=pattern...]',
            )
        selector[name.strip()] = pattern.strip()
    return selector


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")


def _path(loc: tuple[int | str, ...]) -> str:
    """`questions[1].options[2].label`. A key that is not a plain name (it came from
    the input: an unknown key of any size or content) is quoted, escaped and cut."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = part if _NAME.fullmatch(part) else quoted(part, 40)
        out += f".{name}" if out else name
    return out or "input"


def validation_problems(exc: ValidationError) -> list[str]:
    """pydantic's errors as `path: message`, one per problem."""
    return [f"{_path(e['loc'])}: {error_message(e)}" for e in exc.errors(include_url=False)]


def _raise_invalid(problems: list[str]) -> None:
    if problems:
        raise AskError(ErrorCode.INVALID_REQUEST, problems_message(problems))


ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_model(model: type[ModelT], raw: Any) -> ModelT:
    """pydantic's checks, every failure as INVALID_REQUEST naming its path."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise AskError(
            ErrorCode.INVALID_REQUEST, problems_message(validation_problems(exc))
        ) from None
    except RecursionError:  # input nested deeper than the interpreter's stack
        raise AskError(ErrorCode.INVALID_REQUEST, "input: nested too deeply") from None


def parse_input(args: Any) -> AskInput:
    """Validate tool arguments (a dict or JSON text); every violation names its path."""
    if isinstance(args, (str, bytes)):
        try:
            args = json.loads(args)
        except ValueError as exc:  # also bytes that are not UTF-8
            raise AskError(ErrorCode.INVALID_REQUEST, f"input: not valid JSON ({exc})") from None
        except RecursionError:
            raise AskError(ErrorCode.INVALID_REQUEST, "input: JSON nested too deeply") from None
    parsed = validate_model(AskInput, args)
    problems: list[str] = []
    seen_ids: set[str] = set()
    for qi, q in enumerate(parsed.questions):
        if q.action is not None:
            problems.append(
                f"questions[{qi}].action: not an input of ask_user_question (askq.approve sets it)"
            )
        if q.id in seen_ids:
            problems.append(f"questions[{qi}].id: duplicate id {quoted(q.id)}")
        seen_ids.add(q.id)
        seen_labels: set[str] = set()
        for oi, label in enumerate(q.labels):
            if label in seen_labels:
                problems.append(
                    f"questions[{qi}].options[{oi}].label: duplicate label {quoted(label)}"
                )
            seen_labels.add(label)
    _raise_invalid(problems)
    return parsed


def default_answers(request: AskRequest, default: Any) -> Any:
    """The answers a timeout settles with: `default` as given, else each question's
    recommended option (a free-text question has none, so it needs `default`)."""
    if default is not None:
        return default
    missing = [q.id for q in request.questions if not q.options]
    if missing:
        raise AskError(
            ErrorCode.INVALID_REQUEST,
            f"on_timeout='default' needs a default answer for free-text question(s)"
            f" {', '.join(missing)}: pass default",
        )
    return [{"id": q.id, "selected": q.recommended} for q in request.questions]


def parse_answers(questions: list[Question], raw: Any) -> Answers:
    """Validate answers against their questions; return them in question order."""
    if isinstance(raw, Answers):
        raw = raw.model_dump(exclude_none=True)
    elif isinstance(raw, list):
        raw = {"answers": raw}
    answers = validate_model(Answers, raw)
    problems: list[str] = []
    by_id: dict[str, Answer] = {}
    for ai, a in enumerate(answers.answers):
        if a.id in by_id:
            problems.append(f"answers[{ai}].id: question {quoted(a.id)} answered twice")
        elif a.id not in {q.id for q in questions}:
            problems.append(f"answers[{ai}].id: no question with id {quoted(a.id)}")
        by_id.setdefault(a.id, a)
    for q in questions:
        given = by_id.get(q.id)
        where = f"answer to {quoted(q.id)}"
        if given is None:
            problems.append(f"{where}: missing")
            continue
        labels = set(q.labels)
        for label in given.selected:
            if label not in labels:
                problems.append(f"{where}.selected: no option labelled {quoted(label)}")
        if len(set(given.selected)) != len(given.selected):
            problems.append(f"{where}.selected: a label is selected twice")
        custom = given.custom.strip() if given.custom is not None else ""
        if q.action is not None and edited_arguments(custom):
            problems += q.action.edit_problems(custom)
        if not q.options:
            if not custom:
                problems.append(f"{where}.custom: a free-text question needs custom text")
        elif not q.multi_select:
            if len(given.selected) > 1:
                problems.append(f"{where}.selected: single-select takes at most one label")
            if not given.selected and not custom:
                problems.append(f"{where}: choose one option or give custom text")
    _raise_invalid(problems)
    # Blank custom text counts as unused, so it is omitted from the result.
    ordered = [by_id[q.id] for q in questions]
    return Answers(
        answers=[
            a if (a.custom or "").strip() else a.model_copy(update={"custom": None})
            for a in ordered
        ]
    )
