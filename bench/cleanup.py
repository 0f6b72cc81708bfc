"""Section 6: does Redis go back to where it was? Key count before, during and after a
10,000-ask run, once settled state has expired (ASKQ_SETTLED_TTL set short for the
run). Keys are counted by SCAN over the section's prefix."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from askq import Caller, Seam
from askq.redis._resend import REPLY_MIN_TTL_S

from . import _procs
from ._common import (
    QUESTION,
    Context,
    Section,
    count_keys,
    fmt_s,
    key_pattern,
    new_prefix,
    now,
    wipe,
)

CALLERS = 100


async def kinds(ctx: Context, prefix: str) -> str:
    """What the keys are: `req`, `reply`, `tier` ... with counts."""
    found = Counter(
        [key.split(":")[1] async for key in ctx.redis.scan_iter(match=key_pattern(prefix))]
    )
    return ", ".join(f"{kind} {n}" for kind, n in sorted(found.items())) or "none"


async def tombstones(r: Any, prefix: str) -> int:
    """Reply keys that will expire within REPLY_MIN_TTL_S (`askq.redis._resend`)."""
    found = 0
    async for key in r.scan_iter(match=key_pattern(prefix), count=1000):
        if key.split(":")[1] == "reply" and 0 < await r.ttl(key) <= REPLY_MIN_TTL_S:
            found += 1
    return found


async def run(ctx: Context) -> Section:
    n, ttl = ctx.cfg.cleanup_n, ctx.cfg.settled_ttl
    section = Section(f"6. Cleanup: {n:,} asks with ASKQ_SETTLED_TTL={ttl} s")
    prefix = new_prefix("clean")
    worker = _procs.auto_worker(ctx.url, prefix, settled_ttl=ttl).wait_ready()
    try:
        before = await count_keys(ctx.redis, prefix)
        before_kinds = await kinds(ctx, prefix)
        peak = 0
        running = True

        async def sample() -> None:
            nonlocal peak
            while running:
                peak = max(peak, await count_keys(ctx.redis, prefix))
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        async with Seam.from_url(ctx.url, prefix=prefix, settled_ttl=ttl) as seam:
            left = iter(range(n))

            async def caller(i: int) -> None:
                who = Caller(agent_id=f"clean-{i}", turn_id=f"clean-{i}")
                for _ in left:
                    await seam.ask(QUESTION, who)

            started = now()
            await asyncio.gather(*(caller(i) for i in range(CALLERS)))
            settled = now()
            running = False
            await sampler
            at_settle = await count_keys(ctx.redis, prefix)
        # Wait for expiry: the TTL, then Redis's active expiry, until the count is back
        # where it was or holds still for 2 s (the TTL, if shorter); at most TTL + 30 s.
        # A reply key outlives its request for at most REPLY_MIN_TTL_S (what an ask sent
        # again after a lost reply finds): one with a TTL within that floor is a
        # tombstone on its way out, counted apart, not a key left behind.
        after, still_since = at_settle, now()
        while now() < settled + ttl + 30:
            await asyncio.sleep(0.25)
            count = await count_keys(ctx.redis, prefix) - await tombstones(ctx.redis, prefix)
            if count != after:
                after, still_since = count, now()
            if now() > settled + ttl and (after <= before or now() - still_since > min(2, ttl)):
                break
        waited = now() - settled
        after_kinds = await kinds(ctx, prefix)
        after_kinds += f" ({await tombstones(ctx.redis, prefix)} reply tombstones, expiring)"
        k = seam.keys
        # The dashboard's last hour of counts (one hash, `{p}:trends`) is kept for an
        # hour after the last minute anything happened, whatever the settled TTL: the
        # deployment's own, like its registry, not left over by a request.
        if await ctx.redis.exists(k.trends):
            after -= 1
            after_kinds += " (trends: the last hour's counts, kept an hour)"
        lengths = f"tier stream {await ctx.redis.xlen(k.tier(0))} entries, events stream" + (
            f" {await ctx.redis.xlen(k.events)} entries"
        )
    finally:
        worker.stop()
        await wipe(ctx.redis, prefix)
    ctx.results["cleanup_left"] = after - before
    section.add("keys before (worker registered)", str(before), before_kinds)
    section.add(
        "keys during (peak, sampled every 100 ms) / once all settled",
        f"{peak:,} / {at_settle:,}",
        f"{n:,} asks by {CALLERS} callers in {fmt_s(settled - started)}",
    )
    section.add(
        "keys left after expiry, beyond those before",
        f"{after - before:,}",
        f"after {fmt_s(waited)}: {after_kinds}; {lengths}",
        "0 keys",
        after - before <= 0,
    )
    return section
