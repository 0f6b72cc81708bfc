"""Long mrkdwn texts as consecutive section blocks, within a message's block limit.

A question runs to 2,000 characters, 10,000 once escaped (all `&`); a list of ten
options with their descriptions to 31,000. A section holds 3,000, so each is shown as
several consecutive sections. Slack refuses a message of more than 50 blocks
(`invalid_blocks`), so where everything in full would not fit, texts are cut, with an
ellipsis: each keeps at least its first section, texts of a higher rank are cut first
(they get more sections only once every text of a lower rank has all of its own), and
texts of one rank share what is left in turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._mrkdwn import split_escaped, with_ellipsis

SECTION_MAX = 3000
MAX_BLOCKS = 50  # a message's; a modal may have 100

Block = dict[str, Any]


@dataclass(frozen=True)
class LongText:
    """Escaped mrkdwn to show in sections; a higher `rank` is cut before a lower one."""

    text: str
    rank: int


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _sections_shown(pieces: list[list[str]], ranks: list[int], spare: int) -> list[int]:
    """How many of its pieces each text shows: one each, then `spare` more handed out a
    piece at a time, lowest rank first, in turns among the texts of one rank."""
    shown = [1] * len(pieces)
    for rank in sorted(set(ranks)):
        wanting = [n for n, r in enumerate(ranks) if r == rank]
        while spare > 0 and wanting:
            for n in list(wanting):
                if spare > 0 and shown[n] < len(pieces[n]):
                    shown[n] += 1
                    spare -= 1
                if shown[n] == len(pieces[n]):
                    wanting.remove(n)
    return shown


def layout(items: list[Block | LongText], max_blocks: int = MAX_BLOCKS) -> list[Block]:
    """The blocks of `items`, each LongText as the sections that fit. (`items` with one
    section a text must fit `max_blocks`: askq's limits make that 41 blocks at most.)"""
    texts = [item for item in items if isinstance(item, LongText)]
    pieces = [split_escaped(t.text, SECTION_MAX) for t in texts]
    shown = _sections_shown(pieces, [t.rank for t in texts], max_blocks - len(items))
    blocks: list[Block] = []
    n = 0
    for item in items:
        if not isinstance(item, LongText):
            blocks.append(item)
            continue
        kept = pieces[n][: shown[n]]
        if shown[n] < len(pieces[n]):
            kept[-1] = with_ellipsis(kept[-1], SECTION_MAX)
        blocks += [section(piece) for piece in kept]
        n += 1
    return blocks
