"""Agent text is data: shown visibly on a terminal or in a log, quoted and bounded in
error messages.

An agent's header, question, labels, ids and scope (and a human's custom answer) can
hold anything: terminal escape sequences that rewrite the screen, bidi overrides that
reorder it, newlines that forge another line, megabytes of text. Every surface that
shows such text as text (the console, `askq status`, logs, error messages) passes it
through `visible` or `quoted`; HTML and Slack mrkdwn have their own escaping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# C0 and C1 controls (ESC, BEL, backspace, carriage return, ...), DEL, and the
# invisible characters that reorder, hide or fake text: bidi embeddings, overrides,
# isolates and marks (U+061C, U+200E/F), the line and paragraph separators, the soft
# hyphen, the zero-width space, word joiner and invisible operators, the BOM (so "No"
# and "No" + U+200B cannot pass for one label). The zero-width (non-)joiners stay:
# scripts and emoji need them. And the surrogates: alone (a JSON `\ud800` escape, a
# byte that was not UTF-8 in an argument, decoded with `surrogateescape`) one cannot
# be written as UTF-8, so a message or log line repeating it could not be written at
# all; a valid pair is one character in a Python str, never two.
_CONTROLS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u200b\u200e\u200f\u2028\u2029"
    "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff"
)
_HIDDEN_MULTILINE = re.compile(f"[{_CONTROLS}]")
_HIDDEN = re.compile(f"[{_CONTROLS}\n\t]")

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}

# What an error message repeats of agent text, at most (characters), and how many
# problems it lists before saying how many more there are.
QUOTE_MAX = 80
PROBLEM_MAX = 300
PROBLEMS_SHOWN = 5


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def visible(text: str, *, multiline: bool = False) -> str:
    """`text` with every control and invisible reordering character (and every lone
    surrogate) written out as an escape (`\\x1b`, `\\u202e`, `\\ud800`), so what a
    person sees is what the text holds, and it can always be written as UTF-8.
    Newlines (and tabs) are kept only where `multiline` says a field may span lines;
    in a label, header or id a newline would forge a line of the screen."""
    return (_HIDDEN_MULTILINE if multiline else _HIDDEN).sub(_escape, text)


def cut(text: str, limit: int) -> str:
    """At most `limit` characters; a cut text ends with an ellipsis."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def quoted(text: str, limit: int = QUOTE_MAX) -> str:
    """Agent text as an error message repeats it: in double quotes, escaped, bounded.
    A cut text says how long it was."""
    if len(text) > limit:
        return f'"{visible(text[: limit - 1])}…" ({len(text):,} characters)'
    return f'"{visible(text)}"'


def problems_message(problems: Sequence[str], shown: int = PROBLEMS_SHOWN) -> str:
    """Several problems as one message of bounded size: the first few, each cut to a
    readable length, then how many more there are."""
    head = "; ".join(cut(problem, PROBLEM_MAX) for problem in problems[:shown])
    rest = len(problems) - shown
    return head if rest <= 0 else f"{head}; and {rest:,} more problem{'s' if rest > 1 else ''}"


def utf8_problem(text: str) -> str | None:
    """Why `text` cannot be sent as UTF-8 (a lone surrogate, from bad input decoded
    with `surrogateescape` or a JSON `\\ud800` escape), or None when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        if 0xDC80 <= char <= 0xDCFF:  # a byte that was not UTF-8 (an argument, a variable)
            return f"not UTF-8 text (byte 0x{char - 0xDC00:02x} at character {exc.start})"
        return f"not valid Unicode text (a lone surrogate at character {exc.start})"
    return None


# pydantic's messages askq words as its own checks do (`_checks.text_problem`).
_PYDANTIC_MESSAGES = {"string_unicode": "not valid Unicode text (a lone surrogate)"}


def error_message(error: Mapping[str, Any]) -> str:
    """The message of one of pydantic's errors (`ValidationError.errors()`)."""
    return _PYDANTIC_MESSAGES.get(error["type"]) or str(error["msg"])
