"""Section 4: `abort_turn` from another process until the caller's `ask` has settled
ABORTED. The ask is held (claimed by the `hold` group, as by a human who has not
answered); then a separate process aborts its turn. Both stamp CLOCK_MONOTONIC, which
is one clock for every process of the machine."""

from __future__ import annotations

import asyncio
import sys

from askq import AskError, Caller, ErrorCode, Seam, Settings

from . import _procs
from ._common import QUESTION, Context, Latency, Section, new_prefix, now, wipe

WARMUP = 5


async def child() -> None:
    """Reads turn ids on stdin; aborts each; prints `<start> <end> <cancelled>`."""
    async with Seam(settings=Settings()) as seam:
        print("abort: ready", file=sys.stderr, flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            start = now()
            count = await seam.abort_turn(line.strip(), by="bench")
            print(f"{start!r} {now()!r} {count}", flush=True)


async def aborted_at(seam: Seam, turn: str) -> float:
    try:
        await seam.ask(QUESTION, Caller(agent_id="abort-bench", turn_id=turn))
    except AskError as exc:
        if exc.code is ErrorCode.ABORTED:
            return now()
        raise
    raise AssertionError("the ask was answered, not aborted")


async def until_claimed(seam: Seam, turn: str) -> None:
    k = seam.keys
    while True:
        ids = await seam.redis.smembers(k.turn(turn))  # type: ignore[misc]
        if ids and await seam.redis.hget(k.request(next(iter(ids))), "state") == "CLAIMED":
            return
        await asyncio.sleep(0.0005)


async def run(ctx: Context) -> Section:
    n = ctx.cfg.side_n
    section = Section("4. Abort: abort_turn in another process → the caller's ask ABORTED")
    prefix = new_prefix("abort")
    hold = _procs.hold_worker(ctx.url, prefix)
    aborter = _procs.Child(
        "aborter",
        [sys.executable, "-m", "bench.abort", "--child"],
        _procs.env(ctx.url, prefix),
        stdin=True,
        stdout=True,
    )
    _procs.start_all([hold, aborter])
    to_caller, call = [], []
    try:
        async with Seam.from_url(ctx.url, prefix=prefix) as seam:
            for i in range(n + WARMUP):
                turn = f"abort-{i}"
                task = asyncio.create_task(aborted_at(seam, turn))
                await asyncio.wait_for(until_claimed(seam, turn), 10)
                aborter.send(turn)
                settled = await asyncio.wait_for(task, 10)
                start, end, count = (await asyncio.to_thread(aborter.read)).split()
                assert count == "1", count
                if i >= WARMUP:
                    to_caller.append(settled - float(start))
                    call.append(float(end) - float(start))
    finally:
        _procs.stop_all([hold, aborter])
        await wipe(ctx.redis, prefix)
    latency, call_l = Latency.of(to_caller), Latency.of(call)
    ctx.results["abort"] = latency
    raw = ctx.results.get("raw")
    section.add(
        f"abort_turn → caller's ask raised ABORTED, median / p99 (n={n})",
        str(latency),
        f"{latency.median / raw.median:.1f}× raw cycle median" if raw else "",
        "p99 ≤ 5 ms",
        latency.p99 <= 0.005,
    )
    section.add(
        "the abort_turn call itself (aborting process), median / p99",
        str(call_l),
        "SMEMBERS + HGET pipeline + abort_turn.lua",
    )
    return section


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child())
    else:
        raise SystemExit("run `python -m bench --only abort`")
