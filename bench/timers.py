"""Timer lateness and the sweeper's idle CPU, against a real redis-server.

    python -m bench.timers                # 200 deadlines; 20 s of idle per poll delay
    python -m bench.timers --quick        # seconds

1. Lateness: one `askq sweeper` process; a group (in this process) that claims every
   offer and never answers, with an escalation deadline of 1 s; 200 asks started at
   random moments over 4 s, so the deadlines fall due scattered over 1-5 s. Due time:
   the timer's score in the timers zset (server ms, set by the claim's script).
   Fired: the ESCALATED event's stream id (server ms, written by the firing script).
   Lateness = fired - due: median, p99, max.
2. Idle CPU: an `askq sweeper` process with nothing to do, at ASKQ_POLL_DELAY=0.5 (the
   default) and 0.05: its CPU seconds (psutil, user + system) and redis-server's (INFO)
   over `--idle` seconds, after a 2 s warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import redis.asyncio as aioredis

from askq import AnswererRuntime, AskError, Caller, Seam, Settings
from askq.answerers.memory import MemoryAnswerer

from . import _procs
from ._common import QUESTION, new_prefix, percentile, redis_cpu
from ._redis_server import RedisServer

ESCALATE = 1.0


class Holder(MemoryAnswerer):
    """Claims everything, answers nothing; keeps no queues (200 offers)."""

    async def present(self, offer: Any) -> None:
        return None

    async def retract(self, retraction: Any) -> None:
        return None


def sweeper(url: str, prefix: str, **settings: float) -> _procs.Child:
    return _procs.Child(
        "timers-sweeper",
        [*_procs.ASKQ, "sweeper"],
        _procs.env(url, prefix, **settings),
        ready="askq sweeper: ready",
    ).wait_ready()


async def lateness(url: str, n: int, spread: float) -> list[float]:
    prefix = new_prefix("timers")
    child = sweeper(url, prefix)
    due: dict[str, float] = {}
    try:
        async with Seam(settings=Settings(redis_url=url, prefix=prefix)) as seam:
            runtime = AnswererRuntime(seam, Holder(), group="desk", escalate_after=ESCALATE)
            task = await runtime.start(timeout=30)
            sampling = True

            async def sample() -> None:  # every deadline's due time, as the script set it
                while sampling:
                    for member, score in await seam.redis.zrange(
                        seam.keys.timers, 0, -1, withscores=True
                    ):
                        due.setdefault(member, score)
                    await asyncio.sleep(0.02)

            async def ask(i: int) -> None:
                await asyncio.sleep(random.uniform(0, spread))
                try:
                    await seam.ask(QUESTION, Caller(agent_id="timers", turn_id=f"t{i}"))
                except AskError:
                    pass  # NO_ANSWERER once escalated: the only tier gave it up

            sampler = asyncio.create_task(sample())
            await asyncio.wait_for(asyncio.gather(*(ask(i) for i in range(n))), spread + 30)
            sampling = False
            await sampler
            fired: dict[str, int] = {}
            for entry_id, fields in await seam.redis.xrange(seam.keys.events):
                if fields["state"] == "ESCALATED":
                    fired[fields["request"]] = int(entry_id.split("-")[0])
            task.cancel()
    finally:
        child.stop()
    late = []
    for member, score in due.items():
        kind, request_id = member.split("|")[:2]
        if kind == "escalate" and request_id in fired:
            late.append((fired[request_id] - score) / 1000)
    if len(late) != n:
        raise SystemExit(f"timers: {len(late)} of {n} escalations seen fired")
    return late


async def idle_cpu(url: str, poll_delay: float, seconds: float) -> tuple[float, float]:
    """CPU seconds per second of an idle sweeper, and of redis-server meanwhile."""
    child = sweeper(url, new_prefix("idle"), poll_delay=poll_delay)
    r = aioredis.Redis.from_url(url)
    try:
        await asyncio.sleep(2.0)  # start-up and the first maintenance round
        cpu0, redis0, t0 = child.cpu(), await redis_cpu(r), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, redis1, t1 = child.cpu(), await redis_cpu(r), time.monotonic()
    finally:
        child.stop()
        await r.aclose()
    return (cpu1 - cpu0) / (t1 - t0), (redis1 - redis0) / (t1 - t0)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="deadlines (default 200)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle per setting")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, idle, spread = (30, 2.0, 1.0) if args.quick else (args.n, args.idle, 4.0)
    with RedisServer() as server:
        late = await lateness(server.url, n, spread)
        print(
            f"timer lateness, one askq sweeper, {n} escalation deadlines over"
            f" {spread + ESCALATE:g} s: median {ms(statistics.median(late))},"
            f" p99 {ms(percentile(late, 0.99))}, max {ms(max(late))}"
            f" (min {ms(min(late))})"
        )
        for poll_delay in (0.5, 0.05):
            sweeper_cpu, redis_cpu_used = await idle_cpu(server.url, poll_delay, idle)
            print(
                f"idle askq sweeper, ASKQ_POLL_DELAY={poll_delay:g}: {sweeper_cpu * 100:.2f}%"
                f" of a core (redis-server {redis_cpu_used * 100:.2f}%), over {idle:g} s"
            )


if __name__ == "__main__":
    asyncio.run(main())
