"""arq beside askq: the same question as an arq job awaited with `job.result()`, once
with arq's defaults (worker poll_delay 0.5 s, result poll 0.5 s), once with both tuned
to 1 ms; and what each worker costs idle. JSON serializer both ways, never pickle."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

from arq import create_pool
from arq.connections import RedisSettings

from . import _procs
from ._arq_worker import dumps
from ._common import QUESTION, Context, Latency, Row, fmt_s

TUNED = 0.001


async def arq_cycle(ctx: Context, n: int, poll_delay: float | None) -> tuple[Latency, float]:
    """(latency of n sequential jobs, the worker's idle CPU %)."""
    queue = f"bench-arq-{uuid.uuid4().hex[:6]}"
    worker = _procs.Child(
        "arq",
        [
            sys.executable,
            "-m",
            "bench._arq_worker",
            ctx.url,
            queue,
            "default" if poll_delay is None else str(poll_delay),
        ],
        _procs.env(ctx.url, "unused"),
    ).wait_ready()
    pool = await create_pool(
        RedisSettings.from_dsn(ctx.url),
        job_serializer=dumps,
        job_deserializer=json.loads,
        default_queue_name=queue,
    )
    result_poll = {} if poll_delay is None else {"poll_delay": poll_delay}
    samples, ids = [], []
    try:
        warmup = 1 if poll_delay is None else 2
        for i in range(n + warmup):
            start = time.perf_counter()
            job = await pool.enqueue_job("answer", QUESTION)
            assert job is not None
            result = await job.result(timeout=30, **result_poll)
            if i >= warmup:
                samples.append(time.perf_counter() - start)
            assert result["answers"], result
            ids.append(job.job_id)
        idle = await _procs.idle_cpu(worker, ctx.cfg.idle_seconds)
    finally:
        worker.stop()
        for i in range(0, len(ids), 200):
            batch = ids[i : i + 200]
            await pool.delete(*[f"arq:result:{j}" for j in batch], *[f"arq:job:{j}" for j in batch])
        await pool.delete(queue, f"{queue}:health-check")
        await pool.aclose()
    return Latency.of(samples), idle


async def run(ctx: Context, askq: Latency) -> list[Row]:
    cfg = ctx.cfg
    default, default_idle = await arq_cycle(ctx, cfg.arq_default_n, None)
    await asyncio.sleep(0)
    tuned, tuned_idle = await arq_cycle(ctx, cfg.arq_tuned_n, TUNED)
    ctx.results.update(arq_default=default, arq_tuned=tuned)
    faster = default.median / askq.median
    return [
        Row(
            f"arq job.result(), defaults (0.5 s polls), median / p99 (n={default.n})",
            str(default),
            f"askq is {faster:.0f}× faster (median)",
            "askq ≥ 100× faster",
            faster >= 100,
        ),
        Row(
            f"arq job.result(), polls tuned to 1 ms, median / p99 (n={tuned.n})",
            str(tuned),
            f"askq is {tuned.median / askq.median:.1f}× faster (median)",
        ),
        Row(
            "arq worker idle CPU: defaults / 1 ms polls",
            f"{default_idle:.2f} % / {tuned_idle:.1f} %",
            f"of one core, over {fmt_s(cfg.idle_seconds)} idle",
        ),
    ]
