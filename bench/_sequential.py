"""What the round-trip benches of a channel (discord, teams, webhook, mcp) share: the
command line, the questions asked one after another, the table they print, and their
prefix wiped at the end."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import redis.asyncio as aioredis

from askq import Caller, Seam, Settings
from askq.cli._demo import SEED_QUESTION

from . import _procs
from ._common import Latency, wipe
from ._redis_server import RedisServer

WARM_UP = 10


async def ask_each(
    url: str, prefix: str, n: int, after: Callable[[int, float, float], Awaitable[None]]
) -> None:
    """Ask the seed question n times, one after the other, after up to ten that warm up
    (index below 0); `after(i, start, end)` runs once each is answered (perf_counter
    times of the ask and of the answer)."""
    async with Seam(settings=Settings(redis_url=url, prefix=prefix)) as seam:
        for i in range(-min(WARM_UP, n), n):
            start = time.perf_counter()
            await seam.ask(SEED_QUESTION, Caller(agent_id="bench", turn_id=f"t{i}"))
            end = time.perf_counter()
            await after(i, start, end)


async def wipe_prefix(url: str, prefix: str) -> None:
    """A run on a shared Redis leaves nothing behind."""
    client = aioredis.Redis.from_url(url)
    try:
        await wipe(client, prefix)
    finally:
        await client.aclose()


def report(rows: list[tuple[str, Latency]], n: int, width: int, what: str) -> None:
    print(f"{'path':<{width}} {'median / p99':>22}   ({n} {what})")
    for name, latency in rows:
        print(f"{name:<{width}} {latency!s:>22}")


def main(
    doc: str | None, run: Callable[[str, int], Coroutine[Any, Any, None]], n: int, quick: int
) -> None:
    """The command line: `-n` questions (default n), `--quick` (quick of them),
    `--redis-url` (default: a redis-server of its own)."""
    assert doc, "a bench's module text names it"
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("-n", type=int, default=n)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    count = quick if args.quick else args.n
    try:
        if args.redis_url:
            asyncio.run(run(args.redis_url, count))
        else:
            with RedisServer() as server:
                asyncio.run(run(server.url, count))
    finally:
        _procs.stop_all()
