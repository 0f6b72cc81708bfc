"""arq, configured the one way askq uses it: JSON jobs (never pickle), queues under
the key prefix, poll delay from the settings, no signal handlers of its own.

arq runs what may poll: the sweeper's maintenance rounds and the channels' retried
sends. Nothing on the ask -> answer path waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.worker import Function, Worker
from redis.exceptions import ResponseError

from ._blocking import raise_if_cancelled
from ._connections import CONNECTION_ERRORS
from ._sentinel import arq_redis_settings, failover_reply, is_sentinel_url
from ._settings import Settings

log = logging.getLogger("askq.arq")


def dumps(value: Any) -> bytes:
    # default=str: a failed job's exception becomes its message, not a crash of arq.
    return json.dumps(value, default=str, separators=(",", ":")).encode()


def loads(raw: bytes) -> Any:
    return json.loads(raw)


def redis_settings(settings: Settings) -> RedisSettings:
    if is_sentinel_url(settings.redis_url):  # Sentinel: _sentinel.py
        sentinel: RedisSettings = arq_redis_settings(settings.redis_url)
        return sentinel
    return RedisSettings.from_dsn(settings.redis_url)


async def arq_pool(settings: Settings, queue: str) -> ArqRedis:
    return await create_pool(
        redis_settings(settings),
        job_serializer=dumps,
        job_deserializer=loads,
        default_queue_name=queue,
    )


def worker_options(settings: Settings, queue: str) -> dict[str, Any]:
    """What every askq arq worker is given: its queue, JSON jobs, the poll delay, and
    no results kept (nobody reads them)."""
    return {
        "redis_settings": redis_settings(settings),
        "queue_name": queue,
        "poll_delay": settings.poll_delay,
        "job_serializer": dumps,
        "job_deserializer": loads,
        "keep_result": 0,
    }


def arq_worker(
    settings: Settings,
    queue: str,
    functions: list[Function],
    *,
    ctx: dict[str, Any] | None = None,
    **options: Any,
) -> Worker:
    """A worker to run inside an askq process (its owner stops it with `close()`)."""
    return Worker(
        functions=functions,
        handle_signals=False,
        ctx=ctx,
        **worker_options(settings, queue),
        **options,
    )


async def close_worker(worker: Worker) -> None:
    """Stop an arq worker. Its close() cancels the jobs in flight and then re-raises
    their cancellation; a job cut short stays queued and runs again, so that is not
    an error of the caller's."""
    with contextlib.suppress(asyncio.CancelledError):
        await worker.close()


async def run_supervised(name: str, make_worker: Callable[[], Worker]) -> None:
    """Run an arq worker until cancelled, through Redis restarts: arq's poll loop ends
    on a lost connection, so a new worker is started (with backoff) in its place. Jobs
    are in Redis, so one cut short runs again."""
    backoff = 0.1
    while True:
        raise_if_cancelled()
        worker = make_worker()
        try:
            await worker.async_run()
            return
        except CONNECTION_ERRORS as exc:
            log.warning("%s lost Redis (%s); restarting in %.1f s", name, exc, backoff)
        except ResponseError as exc:  # Sentinel: a master failing over (_sentinel.py)
            if not failover_reply(exc):
                raise
            log.warning("%s: Redis fails over (%s); restarting in %.1f s", name, exc, backoff)
        finally:
            with contextlib.suppress(Exception):
                await close_worker(worker)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
