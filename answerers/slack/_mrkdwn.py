"""Slack mrkdwn: agent text escaped, and escaped text cut or split without breaking an
escape.

Slack reads `<...>` in mrkdwn, and in a message's top-level `text` (the notification,
what a screen reader says), as commands, mentions and links: `<!channel>`, `<@U123>`,
`<http://evil|innocent>`. So every string an agent supplied (header, question, labels,
descriptions, ids), a human typed (a custom answer, another channel's `by`) or an error
message quotes goes into such a text only through `escape`. askq's own markup (the
`<@user>` of who answered) is written around escaped text, never inside it.

Escaping turns `&`, `<`, `>` into `&amp;`, `&lt;`, `&gt;`: after it, every `&` starts
one of these, which is how `cut_escaped` and `split_escaped` find where not to cut.
"""

from __future__ import annotations

ELLIPSIS = "…"
_LONGEST_ESCAPE = len("&amp;")


def escape(text: str) -> str:
    """`text` as mrkdwn shows it literally: no mention, link or command."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _safe_end(text: str, end: int) -> int:
    """`end`, or the start of the escape `text[:end]` would cut in two."""
    amp = text.rfind("&", max(end - _LONGEST_ESCAPE + 1, 0), end)
    return amp if amp != -1 and text.find(";", amp, end) == -1 else end


def cut_escaped(text: str, limit: int) -> str:
    """Escaped `text` in at most `limit` characters; a cut text ends with an ellipsis,
    and never inside an escape."""
    return text if len(text) <= limit else text[: _safe_end(text, limit - 1)] + ELLIPSIS


def mrkdwn(text: str, limit: int) -> str:
    """Agent text escaped for mrkdwn, in at most `limit` characters."""
    return cut_escaped(escape(text), limit)


def with_ellipsis(text: str, limit: int) -> str:
    """Escaped `text`, of which more was left out, marked so with an ellipsis: in at
    most `limit` characters, cut (never inside an escape) to make room for it."""
    text = text.rstrip()
    if len(text) < limit:
        return text + ELLIPSIS
    return text[: _safe_end(text, limit - 1)] + ELLIPSIS


def _break(text: str, limit: int) -> int:
    """Where to end the piece of `text` (longer than `limit`) that comes first: after a
    newline in its second half, else after a space in its last quarter (so words and
    paragraphs stay whole), else at `limit` unless that cuts an escape."""
    newline = text.rfind("\n", limit // 2, limit)
    if newline != -1:
        return newline + 1
    space = text.rfind(" ", limit * 3 // 4, limit)
    if space != -1:
        return space + 1
    return _safe_end(text, limit)


def split_escaped(text: str, limit: int) -> list[str]:
    """Escaped `text` as consecutive pieces of at most `limit` characters that join back
    to it, none ending inside an escape."""
    if limit < _LONGEST_ESCAPE:
        raise ValueError(f"cannot split escaped text into pieces of {limit} characters")
    pieces: list[str] = []
    while len(text) > limit:
        end = _break(text, limit)
        pieces.append(text[:end])
        text = text[end:]
    if text or not pieces:
        pieces.append(text)
    return pieces
