"""Section 1: the sequential round trip, beside the raw Redis cycle it is built on.

askq:  seam.ask (this process) -> `askq worker auto` (another process) -> answer -> caller
raw:   XADD (this process) -> XREADGROUP BLOCK (another process) -> LPUSH -> BLPOP

Both workers stay up for the whole section and the two are measured in alternating
chunks, so a noisy neighbour hits both alike. `python -m bench.roundtrip` is
`python -m bench --only roundtrip` (which adds arq beside them).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis

from askq import Caller, Seam

from . import _procs, _suite, arq_compare
from ._common import QUESTION, Context, Latency, Section, new_prefix, wipe

CHUNK = 500
RAW_WORKER = r"""
import sys, redis
r = redis.Redis.from_url(sys.argv[1])
stream, group, reply = sys.argv[2], sys.argv[3], sys.argv[4]
print("ready", file=sys.stderr, flush=True)
while True:
    got = r.xreadgroup(group, "c", {stream: ">"}, count=1, block=0)
    for _, entries in got:
        for entry_id, fields in entries:
            r.lpush(reply, fields[b"n"])
            r.xack(stream, group, entry_id)
"""


class RawCycle:
    """XADD -> XREADGROUP BLOCK (worker process) -> LPUSH -> BLPOP, two connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        base = f"bench-raw-{uuid.uuid4().hex[:6]}"
        self.stream, self.reply = f"{base}:s", f"{base}:reply"
        self.client = aioredis.Redis.from_url(url)
        self.waiter = aioredis.Redis.from_url(url)
        self.proc: _procs.Child | None = None

    async def start(self) -> RawCycle:
        await self.client.xgroup_create(self.stream, "g", id="$", mkstream=True)
        self.proc = _procs.Child(
            "raw",
            [sys.executable, "-c", RAW_WORKER, self.url, self.stream, "g", self.reply],
            _procs.env(self.url, "unused"),
        ).wait_ready()
        await self.measure(50)  # warm up
        return self

    async def measure(self, n: int) -> list[float]:
        samples = []
        for i in range(n):
            start = time.perf_counter()
            await self.client.xadd(self.stream, {"n": i})
            await self.waiter.blpop([self.reply], timeout=5)
            samples.append(time.perf_counter() - start)
        return samples

    async def aclose(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        await self.client.delete(self.stream, self.reply)
        await self.client.aclose()
        await self.waiter.aclose()


@asynccontextmanager
async def raw_cycle(url: str) -> AsyncIterator[RawCycle]:
    raw = RawCycle(url)
    try:
        yield await raw.start()
    finally:
        await raw.aclose()


async def sequential_asks(seam: Seam, n: int, caller: Caller | None = None) -> list[float]:
    caller = caller or Caller(agent_id="bench", turn_id="bench")
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await seam.ask(QUESTION, caller)
        samples.append(time.perf_counter() - start)
    return samples


async def interleaved(
    raw: RawCycle, seam: Seam, n: int, caller: Caller | None = None
) -> tuple[list[float], list[float]]:
    """n samples of each, alternating in chunks."""
    raw_s: list[float] = []
    ask_s: list[float] = []
    while len(ask_s) < n:
        step = min(CHUNK, n - len(ask_s))
        raw_s += await raw.measure(step)
        ask_s += await sequential_asks(seam, step, caller)
    return raw_s, ask_s


CLIENT_COMMANDS = ("evalsha", "eval", "xreadgroup", "xread", "blmpop", "blpop", "lpop", "mget")


def command_costs(
    before: dict[str, Any], after: dict[str, Any], n: int
) -> dict[str, tuple[float, float]]:
    """Per ask: {command: (calls, server µs)}, from two INFO commandstats."""
    out = {}
    for key, stat in after.items():
        old = before.get(key, {"calls": 0, "usec": 0})
        calls = (stat["calls"] - old["calls"]) / n
        if calls >= 0.01:
            out[key.removeprefix("cmdstat_")] = (round(calls, 2), (stat["usec"] - old["usec"]) / n)
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))



async def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    section = Section("1. Round trip (sequential, one caller)")
    prefix = new_prefix("rt")
    worker = _procs.auto_worker(ctx.url, prefix).wait_ready()
    try:
        async with raw_cycle(ctx.url) as raw, Seam.from_url(ctx.url, prefix=prefix) as seam:
            await sequential_asks(seam, 50)  # warm up: scripts loaded, pool filled
            raw_s, ask_s = await interleaved(raw, seam, cfg.n)
            askq_idle = await _procs.idle_cpu(worker, cfg.idle_seconds)
            before = await ctx.redis.info("commandstats")
            m = min(cfg.n, 1000)
            await sequential_asks(seam, m)
            per_ask = command_costs(before, await ctx.redis.info("commandstats"), m)
    finally:
        worker.stop()
        await wipe(ctx.redis, prefix)
    raw_l, ask_l = Latency.of(raw_s), Latency.of(ask_s)
    ctx.results.update(raw=raw_l, askq=ask_l)
    ratio = ask_l.median / raw_l.median
    section.add(
        f"askq ask → auto worker → result, median / p99 (n={ask_l.n})",
        str(ask_l),
        f"{ratio:.2f}× raw median, {ask_l.p99 / raw_l.p99:.2f}× raw p99",
        "≤ 2× raw",
        ratio <= 2,
    )
    section.add(
        f"raw XADD→XREADGROUP BLOCK→LPUSH→BLPOP, median / p99 (n={raw_l.n})",
        str(raw_l),
        "the floor: 2 round trips + 1 wake-up",
    )
    client_cmds = {c: v for c, v in per_ask.items() if c in CLIENT_COMMANDS}
    section.add(
        "Redis work per ask (INFO commandstats, sequential)",
        f"{sum(v[1] for v in client_cmds.values()):.0f} µs",
        "server time of the commands clients sent: "
        + ", ".join(f"{c} {v[0]:g}× ({v[1] / v[0]:.0f} µs)" for c, v in client_cmds.items())
        + f"; {sum(v[0] for c, v in per_ask.items() if c not in CLIENT_COMMANDS):.0f}"
        " calls inside scripts",
    )
    section.add("askq auto worker idle CPU", f"{askq_idle:.2f} %", "of one core")
    arq = await arq_compare.run(ctx, ask_l)
    section.rows += arq
    return section


def main(argv: list[str] | None = None) -> Any:
    return _suite.main(
        {"roundtrip": run}, ["--only", "roundtrip", *(sys.argv[1:] if argv is None else argv)]
    )


if __name__ == "__main__":
    main()
