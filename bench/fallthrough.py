"""Section 5: what each declining tier adds to the round trip.

An answering `askq worker auto` sits at priority 100; `askq worker auto --policy
decline` workers (one group each, at priorities 0, 1, 2, ...) are added in front of it,
so an ask passes k declining tiers before it is answered. Sequential asks with 0, then
1, 3, 5 declining tiers, each interleaved with the raw cycle; the added latency per
tier is (median with k - median with 0) / k, set against one raw round trip.
"""

from __future__ import annotations

from askq import Caller, Seam

from . import _procs
from ._common import Context, Latency, Section, fmt_s, new_prefix, wipe
from .roundtrip import interleaved, raw_cycle, sequential_asks


async def run(ctx: Context) -> Section:
    n = ctx.cfg.side_n
    section = Section("5. Fall-through: latency added per declining tier")
    prefix = new_prefix("ft")
    children = [_procs.auto_worker(ctx.url, prefix, group="answer", priority=100).wait_ready()]
    caller = Caller(agent_id="ft", turn_id="ft")
    medians: dict[int, Latency] = {}
    raw_all: list[float] = []
    try:
        async with raw_cycle(ctx.url) as raw, Seam.from_url(ctx.url, prefix=prefix) as seam:
            for k in (0, *ctx.cfg.tiers):
                more = [
                    _procs.auto_worker(
                        ctx.url, prefix, group=f"decline{i}", priority=i, policy="decline"
                    )
                    for i in range(len(children) - 1, k)
                ]
                children += _procs.start_all(more)
                # Learn the new tiers up front: the seam would on its first STALE reply.
                await seam.tier_streams(refresh=True)
                await sequential_asks(seam, 20, caller)  # warm up (and learn the tiers)
                raw_s, ask_s = await interleaved(raw, seam, n, caller)
                raw_all += raw_s
                medians[k] = Latency.of(ask_s)
                answered_by = (await seam.status()).groups
                assert len(answered_by) == k + 1, answered_by
    finally:
        _procs.stop_all(children)
        await wipe(ctx.redis, prefix)
    raw_l = Latency.of(raw_all)
    base = medians[0].median
    section.add(f"0 declining tiers, median / p99 (n={n})", str(medians[0]), "the baseline")
    worst = 0.0
    for k in ctx.cfg.tiers:
        per_tier = (medians[k].median - base) / k
        worst = max(worst, per_tier / raw_l.median)
        section.add(
            f"{k} declining tier{'s' if k > 1 else ''}, median / p99",
            str(medians[k]),
            f"+{fmt_s(per_tier)} per tier = {per_tier / raw_l.median:.2f} raw round trips",
        )
    section.add(
        "worst added latency per declining tier",
        f"{worst:.2f} raw round trips",
        f"raw cycle median {fmt_s(raw_l.median)} (n={raw_l.n}, interleaved)",
        "≤ 1 raw round trip",
        worst <= 1,
    )
    return section
