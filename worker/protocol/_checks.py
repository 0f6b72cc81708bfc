"""The one check of the text that enters askq from outside, besides the questions and
answers (which their models check): request ids, identifiers (turn, agent, owner,
idempotency key), who answered (`by`), group and replica names, the routing scope,
durations. Every public entry point (the seam, its sync wrapper, a group's handle,
the tool, the registry, the CLI's arguments) checks what it is given here, once, where
it comes in; each failure is an AskError naming the field, before anything reaches
Redis or a log line. Text is refused when it cannot be written as UTF-8 (a lone
surrogate: a JSON `\\ud800` escape, a byte that was not UTF-8 in an argument or a
variable) or is longer than its limit (README, "Limits"); what a message repeats of
it is escaped (`quoted`)."""

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
MAX_CALLER_ID = 200  # an agent, owner or turn id
MAX_IDEMPOTENCY_KEY = 256
MAX_BY = 320  # who answered or withdrew: "email:" and an address of up to 254 characters
MAX_MESSAGE = 2000  # a cancellation's message for the model
MAX_CONSUMER = 200  # a replica's name
REQUEST_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
GROUP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
GROUP_NAME_RULE = "a group name (1-64 letters, digits, '_', '.' or '-')"
MAX_TIMEOUT = 366 * 86400  # seconds: a year; no timeout at all is the default


def text_problem(
    value: Any, max_length: int, *, pattern: re.Pattern[str] | None = None, rule: str = ""
) -> str | None:
    """Why `value` is not acceptable text: not a str, empty or longer than
    `max_length`, not writable as UTF-8, or not matching `pattern` (`rule` says what
    it must be). None when it is fine."""
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if not 0 < len(value) <= max_length:
        return f"1-{max_length} characters, not {len(value):,}"
    if (why := utf8_problem(value)) is not None:
        return why
    if pattern is not None and not pattern.fullmatch(value):
        return f"{quoted(value)} is not {rule}" if rule else f"{quoted(value)} is not allowed"
    return None


def check_text(
    value: Any,
    what: str,
    max_length: int,
    *,
    pattern: re.Pattern[str] | None = None,
    rule: str = "",
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
) -> str:
    """`value` as it was given, when it is 1-`max_length` characters of valid Unicode
    text (matching `pattern`, when given); else an AskError (INVALID_REQUEST, or
    `code`: CONFIG_ERROR for a setting) naming `what`."""
    why = text_problem(value, max_length, pattern=pattern, rule=rule)
    if why is not None:
        raise AskError(code, f"{what}: {why}")
    return str(value)


def check_optional(value: Any, what: str, max_length: int) -> str | None:
    return None if value is None else check_text(value, what, max_length)


def check_group(
    group: Any, what: str = "group", code: ErrorCode = ErrorCode.INVALID_REQUEST
) -> str:
    """A group's name: what a replica registers under, and what an answer, a release
    or an operator's command names."""
    return check_text(group, what, 64, pattern=GROUP_NAME, rule=GROUP_NAME_RULE, code=code)


def check_by(by: Any) -> str:
    """Who answered, withdrew or aborted (`slack:U123`, `email:alice@example.com`,
    `cli`): kept in the settlement and shown to the people and the model it reaches."""
    return check_text(by, "by", MAX_BY)


def check_request_id(request_id: Any) -> str:
    """A request id from outside (a channel's click, a CLI argument), checked before
    it becomes part of a Redis key."""
    if not isinstance(request_id, str) or not REQUEST_ID_PATTERN.fullmatch(request_id):
        shown = quoted(request_id) if isinstance(request_id, str) else type(request_id).__name__
        raise AskError(ErrorCode.INVALID_REQUEST, f"request id {shown}: not a request id")
    return request_id


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


def parse_scope(
    scope: Mapping[str, Any] | None,
    what: str = "scope",
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
) -> dict[str, str]:
    """A request's routing labels (or a group's selector of them: `what`, `code`),
    checked: at most 32, keys like ids (a selector is `key=pattern`), values up to 200
    characters of text; values are made strings."""
    if scope is not None and not isinstance(scope, Mapping):
        raise AskError(code, f"{what}: must be a mapping of labels, not {type(scope).__name__}")
    items = list((scope or {}).items())
    problems: list[str] = []
    if len(items) > MAX_SCOPE:
        problems.append(f"{what}: at most {MAX_SCOPE} labels, not {len(items):,}")
        items = items[:MAX_SCOPE]
    out: dict[str, str] = {}
    for key, raw in items:
        name, value = str(key), str(raw)
        where = f"{what}[{quoted(name, 40)}]"
        if not SCOPE_KEY_PATTERN.fullmatch(name):
            problems.append(f"{where}: a key is 1-{MAX_SCOPE_KEY} letters, digits, '_.:-'")
        elif len(value) > MAX_SCOPE_VALUE:
            problems.append(f"{where}: at most {MAX_SCOPE_VALUE} characters")
        elif (why := utf8_problem(value)) is not None:
            problems.append(f"{where}: {why}")
        out[name] = value
    if problems:
        raise AskError(code, problems_message(problems))
    return out
