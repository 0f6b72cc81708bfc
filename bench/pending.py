"""Section 3: 10,000 and 100,000 asks pending at once from ONE caller process, then all
answered (each size a run of its own, one after the other).

The caller is a child process (`python -m bench.pending --child N`) so its connections
and RSS are its own. A `hold` group (bench/_hold_worker.py) accepts every offer and
holds the claim, as a channel whose humans have not answered yet; once all N are
claimed the bench measures, then answers all of them for the group from this process
(any process may answer for a group). The caller's connections are counted in
`CLIENT LIST` by its client name, throughout.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys

import psutil

from askq import Caller, Seam, Settings

from . import _procs
from ._common import (
    ANSWER,
    QUESTION,
    Context,
    Section,
    fmt_bytes,
    fmt_s,
    new_prefix,
    now,
    wipe,
)

TURNS = 100  # the asks come from 100 agents' turns (100 asks each at 10,000)
SAMPLE = 200  # MEMORY USAGE of this many request hashes, averaged


async def child(n: int) -> None:
    """The caller: n asks at once from one Seam, until every one has settled."""
    proc = psutil.Process()
    async with Seam(settings=Settings()) as seam:
        rss0 = proc.memory_info().rss
        print(json.dumps({"name": seam.client_name, "rss0": rss0}), flush=True)
        started = now()
        tasks = [
            asyncio.create_task(
                seam.ask(QUESTION, Caller(agent_id=f"agent-{i % TURNS}", turn_id=f"t{i % TURNS}"))
            )
            for i in range(n)
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        settled = now()
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        print(
            json.dumps(
                {
                    "started": started,
                    "settled": settled,
                    "ok": n - len(errors),
                    "errors": errors[:3],
                    "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                }
            ),
            flush=True,
        )


async def used_memory(ctx: Context) -> int:
    return int((await ctx.redis.info("memory"))["used_memory"])


async def memory_usage(ctx: Context, key: str) -> int:
    return int(await ctx.redis.memory_usage(key, samples=0) or 0)


async def run(ctx: Context) -> Section:
    """Every size of the config, one after the other, as one section."""
    sizes = ctx.cfg.pending_sizes
    section = Section(
        "3. Concurrency: "
        + " and ".join(f"{n:,}" for n in sizes)
        + " asks pending at once from one caller process"
    )
    for n in sizes:
        section.add(f"[{n:,} pending]", "")
        section.rows += (await run_one(ctx, n)).rows
    return section


async def run_one(ctx: Context, n: int) -> Section:
    section = Section(f"{n:,} asks pending at once from one caller process")
    prefix = new_prefix("pend")
    hold = _procs.hold_worker(ctx.url, prefix, settled_ttl=300).wait_ready()
    mem0 = await used_memory(ctx)
    caller = _procs.Child(
        "pending-caller",
        [sys.executable, "-m", "bench.pending", "--child", str(n)],
        _procs.env(ctx.url, prefix, settled_ttl=300),
        stdout=True,
    )
    peak_conns = 0
    redis_port = int(ctx.url.rsplit(":", 1)[1].split("/")[0])
    peak_sockets = 0
    sampling = True
    try:
        hello = json.loads(await asyncio.to_thread(caller.read))
        name = hello["name"]

        async def sample() -> None:
            nonlocal peak_conns, peak_sockets
            while sampling:
                clients = await ctx.redis.client_list()
                peak_conns = max(peak_conns, sum(1 for c in clients if c.get("name") == name))
                with_redis = [
                    c
                    for c in caller.ps.net_connections(kind="tcp")
                    if c.raddr and c.raddr.port == redis_port
                ]
                peak_sockets = max(peak_sockets, len(with_redis))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        async with Seam.from_url(ctx.url, prefix=prefix) as seam:
            k = seam.keys
            stream = k.tier(0)
            t0 = now()
            while True:  # until every ask is claimed by the hold group
                try:
                    held = (await ctx.redis.xpending(stream, "hold"))["pending"]
                except Exception:  # noqa: BLE001 - the stream may not exist yet
                    held = 0
                if held >= n or caller.proc.poll() is not None:
                    break
                await asyncio.sleep(0.02)
            t_claimed = now()
            mem_pending = await used_memory(ctx) - mem0
            ids = await ctx.redis.zrange(k.pending, 0, -1)
            sample_ids = random.sample(ids, min(SAMPLE, len(ids)))
            req_mem = [await memory_usage(ctx, k.request(i)) for i in sample_ids]
            per_req = sum(req_mem) / len(req_mem)
            stream_share = await memory_usage(ctx, stream) / n
            pending_share = await memory_usage(ctx, k.pending) / n
            turns_share = sum([await memory_usage(ctx, k.turn(f"t{i}")) for i in range(TURNS)]) / n
            keys_total = per_req + stream_share + pending_share + turns_share

            # Answer all of them for the group, as its humans would, 64 at a time.
            gate = asyncio.Semaphore(64)

            async def answer(request_id: str) -> None:
                async with gate:
                    await seam.answer(request_id, "hold", ANSWER, by="bench")

            t_answer = now()
            await asyncio.gather(*(answer(i) for i in ids))
            report = json.loads(await asyncio.to_thread(caller.read))
            mem_settled = await used_memory(ctx) - mem0
            settled_keys = [
                await memory_usage(ctx, k.request(i)) + await memory_usage(ctx, k.reply(i))
                for i in sample_ids
            ]
        sampling = False
        await sampler
    finally:
        sampling = False
        caller.stop()
        hold.stop()
        await wipe(ctx.redis, prefix)
    ctx.results.setdefault("pending", {})[n] = {
        "connections": peak_conns,
        "per_request": mem_pending / n,
        "rss_per_ask": (report["peak_rss"] - hello["rss0"]) / n,
    }
    section.add(
        "asks settled when answered / lost",
        f"{report['ok']:,} / {n - report['ok']:,}",
        "; ".join(report["errors"]) or "every ask returned its answer",
        "all settle, none lost",
        report["ok"] == n,
    )
    section.add(
        "Redis connections the caller held (CLIENT LIST by name, peak)",
        str(peak_conns),
        f"its TCP sockets to Redis (psutil, peak): {peak_sockets}",
        "≤ 8",
        peak_conns <= 8 and peak_sockets <= 8,
    )
    worst = max(mem_pending / n, keys_total)
    section.add(
        "Redis memory per pending request (used_memory delta / n)",
        fmt_bytes(mem_pending / n),
        f"MEMORY USAGE: request hash {per_req:.0f} B + tier stream entry & PEL"
        f" {stream_share:.0f} B + pending zset {pending_share:.0f} B + turn sets"
        f" {turns_share:.0f} B = {keys_total:.0f} B",
        "≤ 1.5 KiB",
        worst <= 1536,
    )
    rss_per_ask = (report["peak_rss"] - hello["rss0"]) / n
    section.add(
        "caller RSS per pending ask (peak RSS − RSS at start, / n)",
        fmt_bytes(rss_per_ask),
        f"peak RSS {fmt_bytes(report['peak_rss'])} over its {fmt_bytes(hello['rss0'])} at start",
        "≤ 4 KiB",
        rss_per_ask <= 4096,
    )
    section.add(
        "time: all claimed / answered → all settled / in all",
        f"{fmt_s(t_claimed - report['started'])} / {fmt_s(report['settled'] - t_answer)}"
        f" / {fmt_s(report['settled'] - report['started'])}",
        f"published and claimed in {fmt_s(t_claimed - t0)} of polling; answers sent by"
        " this process, 64 at a time",
    )
    section.add(
        "Redis memory per settled request until its TTL",
        fmt_bytes(mem_settled / n),
        f"MEMORY USAGE: request hash + reply {sum(settled_keys) / len(settled_keys):.0f} B",
    )
    return section


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(int(sys.argv[2])))
        return
    raise SystemExit("run `python -m bench --only pending`")


if __name__ == "__main__":
    main()
