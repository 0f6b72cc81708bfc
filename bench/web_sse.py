"""The web inbox's live fan-out: N open inbox streams on one replica.

    python -m bench.web_sse [-n 1000] [--asks 30] [--quick] [--redis-url URL]

One `askq worker web` process (the replica measured) on its own `redis-server`; this
process opens N Server-Sent Event streams to it (plain asyncio sockets, one signed-in
session, so the clients cost little next to the server), then asks questions one after
another, each answered once every stream has shown it. It prints:

- ask -> shown: from the moment `seam.ask` is called to the moment each stream has the
  `offer` event (median and p99 over every stream and ask), and to the moment the last
  of the N streams has it (median, p99 over asks);
- the replica's memory (RSS) idle with N streams open, and its CPU over the ask phase;
- Redis commands per question (every party: ask, claim, inbox, feed, answer, retract),
  from `INFO commandstats` (the feed fans out in process, so this does not grow with N).

It deletes every key of its run (its own prefix) at the end: a --redis-url may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx
import psutil
import redis

from askq import Caller, Seam, Settings
from askq.answerers.web import hash_token

from ._redis_server import RedisServer, free_port

SECRET = "bench-web-secret-0123456789abcdef"
TOKEN = "bench-token-0123456789abcdef"
QUESTION: dict[str, Any] = {
    "id": "go",
    "header": "Deploy",
    "question": "Roll out the build?",
    "options": [{"label": "Yes (Recommended)"}, {"label": "No"}],
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Stream:
    """One open /events stream over a raw socket: when each `offer` arrived, by id."""

    def __init__(self) -> None:
        self.offers: dict[str, float] = {}
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self, port: int, cookie: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self._writer = writer
        writer.write(
            (
                "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                f"Cookie: {cookie}\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        self._task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        event = ""
        while True:
            line = await reader.readline()
            if not line:
                return
            text = line.decode().strip()
            if text.startswith("event:"):
                event = text[6:].strip()
            elif text.startswith("data:"):
                if event == "snapshot":
                    self.ready.set()
                elif event == "offer":
                    found = re.search(r'"id": ?"([^"]+)"', text)
                    if found:
                        self.offers[found.group(1)] = time.perf_counter()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._writer is not None:
            self._writer.close()


def commandstats(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def sign_in(port: int) -> str:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        page = await client.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf
        await client.post("/signin", data={"csrf": csrf.group(1), "token": TOKEN})
        # The session cookie is the group's (askq_session_<group>): whichever it set.
        (name,) = [c.name for c in client.cookies.jar if c.name.startswith("askq_session")]
        return f"{name}={client.cookies[name]}"


async def wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError("askq worker web exited at start-up")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError("askq worker web did not become ready")


async def measure(url: str, streams: int, asks: int) -> dict[str, Any]:
    prefix = f"bweb{os.getpid()}"
    port = free_port()
    env = dict(os.environ)
    env.update(
        ASKQ_REDIS_URL=url,
        ASKQ_PREFIX=prefix,
        ASKQ_WEB_SECRET=SECRET,
        ASKQ_WEB_USERS=f"bench={hash_token(TOKEN)}",
        ASKQ_WEB_PORT=str(port),
        ASKQ_LOG_LEVEL="ERROR",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "askq", "worker", "web"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    opened: list[Stream] = []
    try:
        await wait_ready(port, proc)
        replica = psutil.Process(proc.pid)
        rss_before = replica.memory_info().rss
        cookie = await sign_in(port)
        t_open = time.perf_counter()
        for start in range(0, streams, 100):  # open in waves, as browsers would
            wave = [Stream() for _ in range(min(100, streams - start))]
            await asyncio.gather(*(s.open(port, cookie) for s in wave))
            opened.extend(wave)
        await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in opened)), 120)
        open_seconds = time.perf_counter() - t_open
        await asyncio.sleep(1.0)
        rss_open = replica.memory_info().rss
        stats = redis.Redis.from_url(url)
        per_stream: list[float] = []
        to_all: list[float] = []
        async with Seam(settings=Settings(redis_url=url, prefix=prefix)) as seam:
            cpu_before = replica.cpu_times()
            wall_before = time.perf_counter()
            calls_before = commandstats(stats)
            for i in range(asks):
                caller = Caller(agent_id="bench", turn_id=f"turn-{i}")
                known = {rid for s in opened for rid in s.offers}
                t0 = time.perf_counter()
                task = asyncio.create_task(seam.ask({"questions": [QUESTION]}, caller))
                deadline = t0 + 30
                request_id = None
                while time.perf_counter() < deadline:
                    if request_id is None:
                        fresh = {rid for s in opened for rid in s.offers} - known
                        request_id = next(iter(fresh), None)
                    if request_id and all(request_id in s.offers for s in opened):
                        break
                    await asyncio.sleep(0.002)
                assert request_id is not None, "no stream showed the question"
                arrivals = [s.offers[request_id] - t0 for s in opened if request_id in s.offers]
                per_stream.extend(arrivals)
                to_all.append(max(arrivals))
                await seam.answer(request_id, "web", [{"id": "go", "selected": ["No"]}], by="bench")
                await asyncio.wait_for(task, 10)
            wall = time.perf_counter() - wall_before
            cpu_after = replica.cpu_times()
            calls = commandstats(stats) - calls_before
        stats.close()
        cpu = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
        return {
            "streams": len(opened),
            "open_s": open_seconds,
            "asks": asks,
            "median_ms": statistics.median(per_stream) * 1000,
            "p99_ms": pct(per_stream, 0.99) * 1000,
            "all_median_ms": statistics.median(to_all) * 1000,
            "all_p99_ms": pct(to_all, 0.99) * 1000,
            "rss_idle_mb": rss_before / 2**20,
            "rss_open_mb": rss_open / 2**20,
            "cpu_pct": 100 * cpu / wall,
            "cpu_ms_per_ask": 1000 * cpu / asks,
            "commands_per_question": sum(calls.values()) / asks,
            "top_commands": {k: round(v / asks, 1) for k, v in calls.most_common(8)},
        }
    finally:
        for s in opened:
            await s.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        forget(url, prefix)


def forget(url: str, prefix: str) -> None:
    """Delete every key of the run (a --redis-url may be a shared server)."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match="{" + prefix + "}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def report(result: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"web inbox fan-out: {result['streams']} open streams on one replica"
            f" (opened in {result['open_s']:.1f} s), {result['asks']} asks",
            f"  ask -> shown, per stream:        median {result['median_ms']:.1f} ms,"
            f" p99 {result['p99_ms']:.1f} ms",
            f"  ask -> shown on all streams:     median {result['all_median_ms']:.1f} ms,"
            f" p99 {result['all_p99_ms']:.1f} ms",
            f"  replica RSS: {result['rss_idle_mb']:.0f} MiB idle,"
            f" {result['rss_open_mb']:.0f} MiB with the streams open",
            f"  replica CPU over the ask phase: {result['cpu_pct']:.0f} % of one core,"
            f" {result['cpu_ms_per_ask']:.1f} ms per question",
            f"  Redis commands per question (every party): {result['commands_per_question']:.1f}",
            f"    most called: {json.dumps(result['top_commands'])}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--streams", type=int, default=1000)
    parser.add_argument("--asks", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="20 streams, 5 asks")
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    streams, asks = (20, 5) if args.quick else (args.streams, args.asks)
    if args.redis_url:
        result = asyncio.run(measure(args.redis_url, streams, asks))
    else:
        with RedisServer() as server:
            result = asyncio.run(measure(server.url, streams, asks))
    print(report(result))


if __name__ == "__main__":
    main()
