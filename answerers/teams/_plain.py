"""Agent text on an Adaptive Card, shown as written and never read as markup.

A card's `TextBlock` reads Markdown (`**bold**`, `[link](url)`, lists) and Fact texts do
too; a `TextRun` (in a `RichTextBlock`) reads none: "Markdown is not supported" in it,
and without a mention entity nothing in it can mention anyone. So every string an agent
supplied (header, question, labels, descriptions, ids), a person typed (a custom
answer, another channel's attribution) or an error message quotes goes on a card only
as the text of a TextRun, built here; askq's own emphasis is TextRun styling, never
characters in the text. Button titles, choice titles and placeholders are plain text.

What is left to defuse: TextBlock and TextRun both expand the date functions
`{{DATE(...)}}` and `{{TIME(...)}}`, so `{{` is broken with a zero-width space.

Lines become RichTextBlocks of their own (a TextRun's line breaks are not kept by every
Teams client), at most `MAX_LINES` of them; later lines join the last one.
"""

from __future__ import annotations

from typing import Any

from microsoft_teams.cards import CardElement, RichTextBlock, TextRun

ELLIPSIS = "…"
MAX_LINES = 40
_FUNCTION_OPEN = "{{"
_DEFUSED_OPEN = "{\u200b{"


def defused(text: str) -> str:
    """`text` with nothing Adaptive Cards would expand (the DATE/TIME functions)."""
    return text.replace(_FUNCTION_OPEN, _DEFUSED_OPEN)


def cut(text: str, limit: int) -> str:
    """At most `limit` characters; a cut text ends with an ellipsis."""
    if limit <= 0:
        return ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + ELLIPSIS


def run(text: str, **style: Any) -> TextRun:
    """One run of plain text (`style`: weight, size, italic, is_subtle, font_type...)."""
    return TextRun(text=defused(text), **style)


def line(*runs: TextRun, **block: Any) -> RichTextBlock:
    inlines: list[CardElement] = list(runs)
    return RichTextBlock(inlines=inlines, **block)


def paragraphs(text: str, limit: int, **style: Any) -> list[RichTextBlock]:
    """`text` (cut to `limit`) as a block per line; blank lines kept as spacing."""
    lines = cut(text, limit).split("\n")
    if len(lines) > MAX_LINES:
        lines = lines[: MAX_LINES - 1] + [" ".join(lines[MAX_LINES - 1 :])]
    blocks: list[RichTextBlock] = []
    gap = False
    for text_line in lines:
        if not text_line.strip():
            gap = bool(blocks)
            continue
        blocks.append(line(run(text_line, **style), spacing="Medium" if gap else "None"))
        gap = False
    return blocks or [line(run(" ", **style))]
