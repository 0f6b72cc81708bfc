"""Section 2: asks/s end to end with 1..1,000 concurrent callers (tasks of this process,
one Seam, as an agent fleet process would) against 1, 2 and 4 `askq worker auto`
processes; the CPU each process and redis-server used over the measured window."""

from __future__ import annotations

import asyncio
import time

import psutil

from askq import Caller, Seam

from . import _procs
from ._common import QUESTION, Context, Section, new_prefix, redis_cpu, wipe

RAMP = 0.3  # seconds of load before the window opens (pool filled, workers busy)


async def cell(
    ctx: Context, seam: Seam, workers: list[_procs.Child], callers: int
) -> tuple[str, str]:
    done = 0
    stop = asyncio.Event()

    async def caller(i: int) -> None:
        nonlocal done
        who = Caller(agent_id=f"tp-{i}", turn_id=f"tp-{i}")
        while not stop.is_set():
            await seam.ask(QUESTION, who)
            done += 1

    tasks = [asyncio.create_task(caller(i)) for i in range(callers)]
    meter = _procs.CpuMeter(
        {"caller": psutil.Process(), **{f"w{i}": w for i, w in enumerate(workers)}}
    )
    await asyncio.sleep(RAMP)
    n0, r0, t0 = done, await redis_cpu(ctx.redis), time.monotonic()
    meter.start()
    await asyncio.sleep(ctx.cfg.throughput_seconds)
    n1, t1 = done, time.monotonic()
    used = meter.stop()
    redis_used = await redis_cpu(ctx.redis) - r0
    stop.set()
    await asyncio.gather(*tasks)
    wall = t1 - t0
    rate = (n1 - n0) / wall
    pct = {name: 100 * s / meter.wall for name, s in used.items()}
    worker_pct = "+".join(f"{pct[f'w{i}']:.0f}" for i in range(len(workers)))
    ctx.results.setdefault("throughput", {})[(len(workers), callers)] = rate
    return (
        f"{rate:,.0f} asks/s",
        f"CPU % of a core: caller {pct['caller']:.0f}, workers {worker_pct},"
        f" redis {100 * redis_used / wall:.0f}; CPU per ask"
        f" {1e3 * (sum(used.values()) + redis_used) / max(1, n1 - n0):.2f} ms",
    )


async def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    section = Section(
        f"2. Throughput (callers = tasks of one process; {cfg.throughput_seconds:g} s windows)"
    )
    for n_workers in cfg.workers:
        prefix = new_prefix("tp")
        workers = _procs.start_all(
            [_procs.auto_worker(ctx.url, prefix, settled_ttl=120) for _ in range(n_workers)]
        )
        try:
            async with Seam.from_url(ctx.url, prefix=prefix) as seam:
                await asyncio.gather(
                    *(seam.ask(QUESTION, Caller(agent_id="w", turn_id=f"w{i}")) for i in range(50))
                )
                for n_callers in cfg.callers:
                    figure, beside = await cell(ctx, seam, workers, n_callers)
                    section.add(
                        f"{n_workers} worker{'s' if n_workers > 1 else ''},"
                        f" {n_callers:,} caller{'s' if n_callers > 1 else ''}",
                        figure,
                        beside,
                    )
        finally:
            _procs.stop_all(workers)
            await wipe(ctx.redis, prefix)
    rates = ctx.results["throughput"]
    (best_w, best_c), best = max(rates.items(), key=lambda kv: kv[1])
    section.add(
        "best end-to-end rate",
        f"{best:,.0f} asks/s",
        f"{best_w} worker(s), {best_c:,} callers",
        "≥ 3,000 asks/s",
        best >= 3000,
    )
    return section
