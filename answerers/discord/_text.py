"""Agent text in a Discord message, shown as written and never read as markup.

A message's `content` reads Discord's Markdown (`**bold**`, `__underline__`, `~~`,
`||spoiler||`, `` `code` ``, `> quote`, `# heading`, `-# subtext`, lists, `[masked](links)`),
mentions (`<@id>`, `<@&role>`, `<#channel>`, `@everyone`, `@here`), timestamps
(`<t:...>`), emoji shortcodes and bare URLs. Every string an agent supplied (header,
question, labels, descriptions, ids), a person typed (a custom answer, another
channel's attribution) or an error quotes goes into content only through `escape`:
each character Markdown could read is preceded by a backslash (Discord shows the
character alone), and `@everyone`/`@here` get a zero-width space so they do not even
look like mentions. Every message is sent with `allowed_mentions: {"parse": []}`
besides, so nothing in it can ping anyone whatever it says.

Button labels, select options, modal titles and input labels are plain text in
Discord: they are only cut to Discord's lengths (`cut`).
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
# Everything Discord's Markdown, mentions, emoji and links start with.
_MARKUP = re.compile(r"([\\*_~`|>#<\[\]()!:+\-=])")
_ORDERED = re.compile(r"(?m)^(\s*\d+)\.")  # "1. " starts a list
_MASS = re.compile(r"@(everyone|here)", re.IGNORECASE)
NO_MENTIONS: dict[str, list[str]] = {"parse": []}


def escape(text: str) -> str:
    """`text` as Discord shows it literally in a message's content."""
    text = _MARKUP.sub(r"\\\1", text)
    text = _ORDERED.sub(r"\1\\.", text)
    return _MASS.sub("@\u200b\\1", text)


def cut(text: str, limit: int) -> str:
    """At most `limit` characters; a cut text ends with an ellipsis."""
    if limit <= 0:
        return ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + ELLIPSIS


def shown(text: str, limit: int) -> str:
    """Agent text cut to `limit` characters (as a person reads them), then escaped."""
    return escape(cut(text, limit))


def plain(text: str, limit: int) -> str:
    """A plain-text field (a label): whitespace runs as one space, cut to `limit`."""
    return cut(" ".join(text.split()) or "-", limit)
