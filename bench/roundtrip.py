"""Sequential round trip of `ask` against a local `auto` worker process, beside the bare
Redis cycle it is built on, in the same run:

    python -m bench.roundtrip [--redis-url redis://127.0.0.1:6379/15] [-n 2000]

askq:  seam.ask (this process) -> auto worker (another process) -> answer -> caller
raw:   XADD (this process) -> XREADGROUP BLOCK (another process) -> LPUSH -> BLPOP
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis

from worker import Caller, Seam
from worker._demo import SEED_QUESTION as SEED

ROOT = Path(__file__).resolve().parent.parent
RAW_WORKER = r"""
import sys, redis
r = redis.Redis.from_url(sys.argv[1])
stream, group, reply = sys.argv[2], sys.argv[3], sys.argv[4]
print("ready", flush=True)
while True:
    got = r.xreadgroup(group, "c", {stream: ">"}, count=1, block=0)
    for _, entries in got:
        for entry_id, fields in entries:
            if fields.get(b"stop"):
                sys.exit(0)
            r.lpush(reply, fields[b"n"])
            r.xack(stream, group, entry_id)
"""


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e6, p99 * 1e6


async def raw_cycle(url: str, n: int) -> list[float]:
    prefix = f"bench-raw-{uuid.uuid4().hex[:8]}"
    stream, group, reply = f"{prefix}:s", "g", f"{prefix}:reply"
    client = aioredis.Redis.from_url(url)
    waiter = aioredis.Redis.from_url(url)
    await client.xgroup_create(stream, group, id="$", mkstream=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", RAW_WORKER, url, stream, group, reply],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    samples = []
    try:
        for i in range(n):
            start = time.perf_counter()
            await client.xadd(stream, {"n": i})
            await waiter.blpop([reply], timeout=5)
            samples.append(time.perf_counter() - start)
        await client.xadd(stream, {"stop": 1})
        proc.wait(10)
    finally:
        proc.kill()
        await client.delete(stream, reply)
        await client.aclose()
        await waiter.aclose()
    return samples


async def askq_cycle(url: str, n: int) -> list[float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "ASKQ_REDIS_URL": url, "ASKQ_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker", "worker", "auto"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None and proc.stderr.readline().endswith(": ready\n")
    samples = []
    try:
        async with Seam.from_url(url, prefix=prefix, settled_ttl=60) as seam:
            caller = Caller(agent_id="bench", turn_id="bench")
            for _ in range(50):  # warm up: script load, connections
                await seam.ask(SEED, caller)
            for _ in range(n):
                start = time.perf_counter()
                await seam.ask(SEED, caller)
                samples.append(time.perf_counter() - start)
            keys = [k async for k in seam.redis.scan_iter(match="{" + prefix + "}:*")]
            if keys:
                await seam.redis.delete(*keys)
    finally:
        proc.terminate()
        proc.wait(10)
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("-n", type=int, default=2000)
    args = parser.parse_args()
    raw = await raw_cycle(args.redis_url, args.n)
    ask = await askq_cycle(args.redis_url, args.n)
    raw_med, raw_p99 = summary(raw)
    ask_med, ask_p99 = summary(ask)
    print(json.dumps({"n": args.n, "redis": args.redis_url}))
    print(f"{'cycle':<34}{'median µs':>12}{'p99 µs':>12}")
    print(f"{'raw XADD>XREADGROUP>LPUSH>BLPOP':<34}{raw_med:>12.0f}{raw_p99:>12.0f}")
    print(f"{'askq ask -> auto worker':<34}{ask_med:>12.0f}{ask_p99:>12.0f}")
    print(f"{'ratio askq / raw':<34}{ask_med / raw_med:>12.2f}{ask_p99 / raw_p99:>12.2f}")


if __name__ == "__main__":
    asyncio.run(main())
