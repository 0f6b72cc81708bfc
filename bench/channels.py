"""The chat and webhook channels' round trips, in `python -m bench`: ask → the question
reaches the platform's stand-in (a Teams card, a Discord message, a signed webhook
POST) → a person answers there → the agent resumes, each through a real `askq worker
<channel>` process, one question after another, beside the raw cycle.

Each channel's own bench (`python -m bench.teams_roundtrip`, `discord_roundtrip`,
`webhook_roundtrip`) prints every leg; here each gets its first leg and its whole round
trip. The stand-ins are the tests' (tests/*_standin.py, tests/webhook_receiver.py): they
speak each platform's protocol on 127.0.0.1, so the figures are askq's share, not the
platform's own latency.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ._common import Context, Latency, Section

Measure = Callable[[str, int], Awaitable[list[tuple[str, Latency]]]]


def _channels() -> list[Measure]:
    # Imported here: each pulls in its channel's extra and the tests' stand-in.
    from . import discord_roundtrip, teams_roundtrip, webhook_roundtrip

    return [teams_roundtrip.measure, discord_roundtrip.measure, webhook_roundtrip.measure]


async def run(ctx: Context) -> Section:
    n = 20 if ctx.cfg.quick else max(50, ctx.cfg.side_n // 10)
    section = Section(
        "7. Channels: ask → question at the platform's stand-in → answered there → agent resumes"
    )
    raw = ctx.results.get("raw")
    for measure in _channels():
        rows = await measure(ctx.url, n)
        first, whole = rows[0], rows[-1]
        section.add(f"{first[0]}, median / p99 (n={n})", str(first[1]))
        section.add(
            f"{whole[0]}, median / p99",
            str(whole[1]),
            f"{whole[1].median / raw.median:.1f}× raw cycle median" if raw else "",
        )
    return section
