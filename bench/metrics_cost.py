"""What metrics cost on the ask -> answer path (`python -m bench.metrics_cost`).

1. In process: the recorder calls a worker makes per ask (offered, decided, settled),
   with the no-op recorder (no --metrics-port, no extra) and with Prometheus's.
2. End to end: sequential asks answered by an `askq worker auto` without and with
   `--metrics-port`, in alternating chunks (both workers up, two prefixes), so a noisy
   neighbour hits both alike. Neither adds a Redis round trip: the counters live in
   the worker; pending by state is read from Redis only when Prometheus scrapes.

Starts its own redis-server on a free loopback port (no persistence).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from askq import Caller, Seam, Settings
from askq.observing._metrics import PrometheusRecorder
from askq.protocol._recorder import Recorder

from . import _procs
from ._common import QUESTION, new_prefix, percentile
from ._redis_server import RedisServer


def per_ask_calls(recorder: Recorder, n: int) -> float:
    """Seconds per ask of what the runtime records for an answered one."""
    start = time.perf_counter()
    for _ in range(n):
        recorder.offered("auto", 0)
        recorder.decided("auto", "answered", 0.002)
        recorder.settled("auto", "answered", 0.004)
    return (time.perf_counter() - start) / n


async def sequential(seam: Seam, n: int) -> list[float]:
    caller = Caller(agent_id="bench", turn_id="bench")
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await seam.ask(QUESTION, caller)
        out.append(time.perf_counter() - start)
    return out


def fmt(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples) * 1e6:.0f} µs,"
        f" p99 {percentile(samples, 0.99) * 1e6:.0f} µs"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", type=int, default=3000, help="asks per side (default 3000)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 200 if args.quick else args.n
    chunk = min(250, n)

    from prometheus_client import CollectorRegistry

    calls = 20_000 if args.quick else 200_000
    noop = per_ask_calls(Recorder(), calls)
    prom = per_ask_calls(PrometheusRecorder(CollectorRegistry()), calls)
    print(
        f"recorder calls per answered ask: no-op {noop * 1e9:.0f} ns,"
        f" prometheus {prom * 1e9:.0f} ns"
    )

    with RedisServer() as server:
        plain, metered = new_prefix("plain"), new_prefix("metered")
        workers = [
            _procs.auto_worker(server.url, plain),
            _procs.auto_worker(server.url, metered, metrics_port=0, metrics_addr="127.0.0.1"),
        ]
        _procs.start_all(workers)
        try:
            async with (
                Seam(settings=Settings(redis_url=server.url, prefix=plain)) as a,
                Seam(settings=Settings(redis_url=server.url, prefix=metered)) as b,
            ):
                await sequential(a, 50)
                await sequential(b, 50)
                off: list[float] = []
                on: list[float] = []
                first = True
                while len(on) < n:  # alternating which side goes first, chunk by chunk
                    if first:
                        off += await sequential(a, chunk)
                    on += await sequential(b, chunk)
                    if not first:
                        off += await sequential(a, chunk)
                    first = not first
        finally:
            _procs.stop_all(workers)
    print(f"round trip, worker without metrics: {fmt(off)} ({len(off)} asks)")
    print(f"round trip, worker with --metrics-port: {fmt(on)} ({len(on)} asks)")
    delta = statistics.median(on) - statistics.median(off)
    print(f"difference of medians: {delta * 1e6:+.0f} µs")


if __name__ == "__main__":
    asyncio.run(main())
