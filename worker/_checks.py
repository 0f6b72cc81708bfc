"""Checks of what callers and channels pass besides the questions: request ids,
identifiers (turn, agent, owner, idempotency key), durations, the routing scope. Each
failure is an AskError naming what is wrong, before anything reaches Redis."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ._errors import AskError, ErrorCode
from ._text import problems_message, quoted, utf8_problem

MAX_SCOPE = 32  # routing labels per request
MAX_SCOPE_KEY = 64
MAX_SCOPE_VALUE = 200
REQUEST_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TIMEOUT = 366 * 86400  # seconds: a year; no timeout at all is the default


def check_request_id(request_id: Any) -> str:
    """A request id from outside (a channel's click, a CLI argument), checked before
    it becomes part of a Redis key."""
    if not isinstance(request_id, str) or not REQUEST_ID_PATTERN.fullmatch(request_id):
        shown = quoted(request_id) if isinstance(request_id, str) else type(request_id).__name__
        raise AskError(ErrorCode.INVALID_REQUEST, f"request id {shown}: not a request id")
    return request_id


def check_text(value: Any, what: str, max_length: int) -> str:
    """An identifier the caller gives (a turn id, an idempotency key): 1-`max_length`
    characters of valid Unicode text, else INVALID_REQUEST naming `what`."""
    if not isinstance(value, str):
        raise AskError(
            ErrorCode.INVALID_REQUEST, f"{what}: must be text, not {type(value).__name__}"
        )
    if not 0 < len(value) <= max_length:
        raise AskError(
            ErrorCode.INVALID_REQUEST, f"{what}: 1-{max_length} characters, not {len(value):,}"
        )
    if (why := utf8_problem(value)) is not None:
        raise AskError(ErrorCode.INVALID_REQUEST, f"{what}: {why}")
    return value


def duration_ms(
    seconds: Any,
    what: str,
    *,
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
    maximum: float = MAX_TIMEOUT,
) -> int:
    """Seconds as whole milliseconds for Redis, rounded up: 0.0004 s is 1 ms, never
    0 (which the scripts read as "none"). `0` stays 0. Refuses what is not a number,
    negative, not finite or above `maximum`, naming `what`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise AskError(code, f"{what}: must be a number of seconds, not {type(seconds).__name__}")
    if not 0 <= seconds <= maximum:  # also NaN and infinity
        raise AskError(code, f"{what}: must be between 0 and {maximum:,.0f} seconds, not {seconds}")
    return math.ceil(seconds * 1000)


SCOPE_KEY_PATTERN = re.compile(rf"^[A-Za-z0-9_.:-]{{1,{MAX_SCOPE_KEY}}}$")


def parse_scope(scope: Mapping[str, Any] | None) -> dict[str, str]:
    """A request's routing labels, checked: at most 32, keys like ids (a selector is
    `key=pattern`), values up to 200 characters of text; values are made strings."""
    items = list((scope or {}).items())
    problems: list[str] = []
    if len(items) > MAX_SCOPE:
        problems.append(f"scope: at most {MAX_SCOPE} labels, not {len(items):,}")
        items = items[:MAX_SCOPE]
    out: dict[str, str] = {}
    for key, raw in items:
        name, value = str(key), str(raw)
        where = f"scope[{quoted(name, 40)}]"
        if not SCOPE_KEY_PATTERN.fullmatch(name):
            problems.append(f"{where}: a key is 1-{MAX_SCOPE_KEY} letters, digits, '_.:-'")
        elif len(value) > MAX_SCOPE_VALUE:
            problems.append(f"{where}: at most {MAX_SCOPE_VALUE} characters")
        elif (why := utf8_problem(value)) is not None:
            problems.append(f"{where}: {why}")
        out[name] = value
    if problems:
        raise AskError(ErrorCode.INVALID_REQUEST, problems_message(problems))
    return out
