"""`python -m bench.cluster`: askq on a local Redis Cluster (three masters, three
replicas) beside a single redis-server, on this machine.

    python -m bench.cluster [--seconds 5] [--callers 64] [--latency-asks 400]

- Latency: one caller asking one question after another, one `askq worker auto`
  answering, on a single Redis and on the cluster: the median and p99 round trip, so
  the difference is what the cluster client adds per ask.
- Throughput: callers (tasks of one process per deployment) asking without pause,
  one auto worker per deployment, for `--seconds`: one deployment (one hash tag: one
  master does all the work) against three deployments whose hash tags land on the
  three masters (the spread ASKQ_SHARDS would give one deployment). Each master's CPU
  is read from INFO before and after, so the server-side cost per ask per master is
  printed beside the end-to-end rate: on a 2-core machine shared by the callers, the
  workers and six redis-servers, the clients, not Redis, bound the rate.
- Shards: one deployment with ASKQ_SHARDS=1 and =3 (the same callers, one auto
  worker): asks/s end to end, and per master the Redis CPU and the commands per ask
  (INFO cpu, INFO stats): with 3 shards each master carries about a third.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import redis.asyncio as aioredis
from redis.crc import key_slot

from askq import Caller, Seam, Settings
from askq.redis._connections import command_client

from . import _procs
from ._common import QUESTION, new_prefix
from ._redis_cluster import RedisCluster
from ._redis_server import RedisServer

Load = dict[int, tuple[float, int]]  # per master port: CPU seconds, commands processed


async def master_load(cluster: RedisCluster) -> Load:
    """Each master's CPU seconds (user + sys) and commands processed so far."""
    load = {}
    for port in cluster.master_ports():
        async with aioredis.Redis(host="127.0.0.1", port=port) as node:
            cpu = await node.info("cpu")
            stats = await node.info("stats")
        load[port] = (
            float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            int(stats["total_commands_processed"]),
        )
    return load


def prefixes_on_masters(cluster: RedisCluster, n: int) -> list[str]:
    """`n` new prefixes whose hash tags land on `n` different masters."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < n:
        prefix = new_prefix(f"cl{i}")
        found.setdefault(cluster.master_of(key_slot(("{" + prefix + "}").encode())), prefix)
        i += 1
    return list(found.values())


async def latency(url: str, asks: int) -> tuple[float, float]:
    prefix = new_prefix("lat")
    [worker] = _procs.start_all([_procs.auto_worker(url, prefix, settled_ttl=120)])
    try:
        async with Seam.from_url(url, prefix=prefix) as seam:
            who = Caller(agent_id="lat", turn_id="lat")
            for _ in range(50):  # warm: scripts loaded, pools filled
                await seam.ask(QUESTION, who)
            times = []
            for _ in range(asks):
                t0 = time.perf_counter()
                await seam.ask(QUESTION, who)
                times.append(time.perf_counter() - t0)
    finally:
        _procs.stop_all([worker])
    times.sort()
    return statistics.median(times) * 1e3, times[int(len(times) * 0.99)] * 1e3


async def command_latency(url: str, n: int = 3000) -> tuple[float, float]:
    """One keyed command after another (GET of a deployment's key) through askq's
    command client: the client's own cost per command, and the median round trip."""
    import resource

    client = command_client(None, Settings(redis_url=url, prefix="lat"))
    try:
        for _ in range(100):
            await client.get("{lat}:x")
        times = []
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(n):
            t0 = time.perf_counter()
            await client.get("{lat}:x")
            times.append(time.perf_counter() - t0)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        await client.aclose()
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    return 1e6 * cpu / n, 1e6 * statistics.median(times)


async def asking_window(
    cluster: RedisCluster, askers: list[tuple[Seam, Caller]], seconds: float
) -> tuple[int, float, Load, Load]:
    """Each (seam, caller) asks one question after another; after a 1 s ramp, for
    `seconds`: the asks done, the time it took, and each master's load before and after."""
    done = 0
    stop = asyncio.Event()

    async def ask(seam: Seam, who: Caller) -> None:
        nonlocal done
        while not stop.is_set():
            await seam.ask(QUESTION, who)
            done += 1

    tasks = [asyncio.create_task(ask(seam, who)) for seam, who in askers]
    try:
        await asyncio.sleep(1.0)  # ramp
        n0, load0, t0 = done, await master_load(cluster), time.monotonic()
        await asyncio.sleep(seconds)
        n1, load1, t1 = done, await master_load(cluster), time.monotonic()
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return n1 - n0, t1 - t0, load0, load1


async def throughput(
    cluster: RedisCluster, prefixes: list[str], callers: int, seconds: float
) -> tuple[float, dict[int, float]]:
    url = cluster.url
    workers = _procs.start_all([_procs.auto_worker(url, p, settled_ttl=120) for p in prefixes])
    seams = [Seam.from_url(url, prefix=p) for p in prefixes]
    try:
        for seam in seams:
            await seam.__aenter__()
        per = max(1, callers // len(seams))
        askers = [
            (seam, Caller(agent_id=f"c{i}", turn_id=f"c{i}")) for seam in seams for i in range(per)
        ]
        asks, elapsed, load0, load1 = await asking_window(cluster, askers, seconds)
    finally:
        for seam in seams:
            await seam.aclose()
        _procs.stop_all(workers)
    per_ask = {port: 1e6 * (load1[port][0] - load0[port][0]) / max(1, asks) for port in load1}
    return asks / elapsed, per_ask


async def sharded(
    cluster: RedisCluster, shards: int, callers: int, seconds: float
) -> tuple[float, dict[int, tuple[float, float]]]:
    """One deployment with `shards` shards: asks/s, and per master the Redis CPU (µs)
    and the commands per ask."""
    url, prefix = cluster.url, new_prefix(f"sh{shards}")
    [worker] = _procs.start_all([_procs.auto_worker(url, prefix, settled_ttl=120, shards=shards)])
    seam = Seam.from_url(url, prefix=prefix, shards=shards)
    try:
        await seam.__aenter__()
        # (a turn per caller: the turns spread over the shards)
        askers = [(seam, Caller(agent_id=f"c{i}", turn_id=f"c{i}")) for i in range(callers)]
        asks, elapsed, load0, load1 = await asking_window(cluster, askers, seconds)
    finally:
        await seam.aclose()
        _procs.stop_all([worker])
    per_master = {
        port: (
            1e6 * (load1[port][0] - load0[port][0]) / max(1, asks),
            (load1[port][1] - load0[port][1]) / max(1, asks),
        )
        for port in load1
    }
    return asks / elapsed, per_master


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--latency-asks", type=int, default=400)
    parser.add_argument("--only-shards", action="store_true", help="Only ASKQ_SHARDS 1 vs 3.")
    args = parser.parse_args()
    with RedisServer() as single, RedisCluster() as cluster:
        for shards in (1, 3):
            rate, by_master = await sharded(cluster, shards, args.callers, args.seconds)
            cost = ", ".join(
                f":{port} {us:.0f} µs, {cmds:.1f} cmds"
                for port, (us, cmds) in sorted(by_master.items())
            )
            total = sum(us for us, _ in by_master.values())
            busiest = max(us for us, _ in by_master.values())
            print(
                f"ASKQ_SHARDS={shards}: {rate:,.0f} asks/s end to end; Redis per ask by master:"
                f" {cost}; total {total:.0f} µs, busiest master {busiest:.0f} µs"
            )
        if args.only_shards:
            return
        single_cmd = await command_latency(single.url)
        cluster_cmd = await command_latency(cluster.url)
        print(
            f"one command: single Redis client CPU {single_cmd[0]:.0f} µs, round trip"
            f" {single_cmd[1]:.0f} µs; cluster client CPU {cluster_cmd[0]:.0f} µs, round trip"
            f" {cluster_cmd[1]:.0f} µs"
        )
        single_lat = await latency(single.url, args.latency_asks)
        cluster_lat = await latency(cluster.url, args.latency_asks)
        print(
            f"round trip, 1 caller: single Redis median {single_lat[0]:.2f} ms"
            f" (p99 {single_lat[1]:.2f}); cluster median {cluster_lat[0]:.2f} ms"
            f" (p99 {cluster_lat[1]:.2f}); added {cluster_lat[0] - single_lat[0]:+.2f} ms"
        )
        for n in (1, 3):
            rate, per_ask = await throughput(
                cluster, prefixes_on_masters(cluster, n), args.callers, args.seconds
            )
            spread = ", ".join(f":{port} {us:.0f} µs" for port, us in sorted(per_ask.items()))
            print(
                f"{n} deployment(s) on {n} master(s): {rate:,.0f} asks/s end to end;"
                f" Redis CPU per ask by master: {spread}"
            )


if __name__ == "__main__":
    asyncio.run(main())
