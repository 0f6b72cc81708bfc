"""A new request from the caller's input: validated (INVALID_REQUEST naming what is
wrong), with a new id, its idempotency key as the index knows it, and the settlement
its timeout would write, decided at ask time. Pure: no Redis."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ._checks import MAX_IDEMPOTENCY_KEY, check_text, parse_scope
from ._errors import AskError, ErrorCode
from ._messages import TIMED_OUT_MESSAGE
from ._models import (
    AskInput,
    AskRequest,
    Caller,
    Question,
    Settlement,
    default_answers,
    parse_answers,
    parse_input,
)
from ._types import OnTimeout


def idempotency_digest(key: str) -> str:
    """The idempotency key as the request's index knows it (`Keys.idem`)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def build_request(
    questions: AskInput | Mapping[str, Any] | Sequence[Question | Mapping[str, Any]] | str,
    caller: Caller,
    scope: Mapping[str, str] | None = None,
    *,
    idempotency_key: str | None = None,
    trace: str | None = None,
    request_id: str | None = None,
) -> AskRequest:
    """A validated request (INVALID_REQUEST naming what is wrong), with a new id."""
    if isinstance(questions, AskInput):
        parsed = questions
    elif isinstance(questions, Sequence) and not isinstance(questions, (str, bytes)):
        items = [q.model_dump(by_alias=True) if isinstance(q, Question) else q for q in questions]
        parsed = parse_input({"questions": items})
    else:
        parsed = parse_input(questions)
    scope_dict = parse_scope(scope)
    digest = None
    if idempotency_key is not None:
        digest = idempotency_digest(
            check_text(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY)
        )
    # A new id for every request, idempotent or not: nothing keyed by a request id (a
    # replica's cache, a channel's record of its message) can then outlive the request
    # and be taken for another one asked later with the same key.
    return AskRequest(
        id=request_id or uuid.uuid4().hex,
        questions=parsed.questions,
        scope=scope_dict,
        caller=caller,
        created_ms=int(time.time() * 1000),
        idempotency=digest,
        trace=trace,
    )


def timeout_settlement(
    request: AskRequest, timeout: float | None, on_timeout: OnTimeout, default: Any
) -> str:
    """The settlement a timeout writes, decided (and validated) at ask time."""
    if timeout is None:
        return ""
    if not timeout > 0:
        raise AskError(ErrorCode.INVALID_REQUEST, f"timeout: must be > 0 seconds, not {timeout}")
    if on_timeout == "fail":
        body = Settlement(
            state="CANCELLED", code=ErrorCode.TIMED_OUT, message=TIMED_OUT_MESSAGE, by="timeout"
        )
    elif on_timeout == "default":
        answers = parse_answers(request.questions, default_answers(request, default))
        body = Settlement(state="ANSWERED", answers=answers.answers, by="timeout", defaulted=True)
    else:
        raise AskError(
            ErrorCode.INVALID_REQUEST,
            f"on_timeout must be 'fail' or 'default', not {on_timeout!r}",
        )
    return body.model_dump_json(exclude_none=True)
