"""arq, configured the one way askq uses it: JSON jobs (never pickle), queues under
the key prefix, poll delay from the settings, no signal handlers of its own.

arq runs what may poll: the sweeper's maintenance rounds and the channels' retried
sends. Nothing on the ask -> answer path waits on it.

arq's own keys have a prefix fixed in `arq.constants` (`arq:job:<id>`, `arq:in-progress:`,
`arq:result:`, `arq:retry:`, the `arq:abort` zset): outside the deployment's prefix, so
left behind by a cleanup of it, and outside its hash tag, so on a Redis Cluster arq's
MULTI (a job key and the queue, or `arq:abort` beside them) would span slots. The
connections arq is given write them under the prefix instead (`{p}:arq:job:<id>`, ...),
and on a cluster they are plain connections to the master owning the prefix's slot
(`pinned_client`), so arq's WATCH and MULTI run as on a single Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from arq.connections import ArqRedis
from arq.worker import Function, Worker
from redis.exceptions import ResponseError

from ..protocol._settings import Settings
from ._blocking import raise_if_cancelled
from ._connections import CONNECTION_ERRORS, pinned_client
from ._full import episode, is_full
from ._keys import Keys
from ._outage import outage
from ._sentinel import failover_reply

log = logging.getLogger("askq.arq")


def dumps(value: Any) -> bytes:
    # default=str: a failed job's exception becomes its message, not a crash of arq.
    return json.dumps(value, default=str, separators=(",", ":")).encode()


def loads(raw: bytes) -> Any:
    return json.loads(raw)


# arq.constants' key prefixes (`arq:abort` is a whole key).
ARQ_KEYS = ("arq:job:", "arq:in-progress:", "arq:result:", "arq:retry:", "arq:abort")
_ARQ_KEYS_B = tuple(key.encode() for key in ARQ_KEYS)


class _ArqKeysUnderPrefix:
    """Mixed into arq's connection class: every argument that is one of arq's keys
    goes out under the deployment's prefix (`arq_base`, `{p}:`). Nothing else arq sends
    starts with `arq:` (payloads are JSON, job ids and queue names are askq's)."""

    def __init__(self, *args: Any, arq_base: str, **kwargs: Any) -> None:
        self._arq_base = arq_base
        self._arq_base_b = arq_base.encode()
        super().__init__(*args, **kwargs)

    def pack_command(self, *args: Any) -> Any:
        return super().pack_command(*map(self._under_prefix, args))  # type: ignore[misc]

    def _under_prefix(self, arg: Any) -> Any:
        if isinstance(arg, str) and arg.startswith(ARQ_KEYS):
            return self._arq_base + arg
        if isinstance(arg, bytes) and arg.startswith(_ARQ_KEYS_B):
            return self._arq_base_b + arg
        return arg


def arq_client(settings: Settings, queue: str) -> ArqRedis:
    """arq's client: JSON jobs, its keys under the prefix, one server (see above).

    Its pool opens connections as needed, as arq's own `create_pool` does: arq holds one
    per job in flight plus its poll loop and health beat, so `max_jobs` bounds it; a
    bounded pool that waits for a free connection would turn one arq leaks on a
    cancellation into a worker that hangs at shutdown."""
    client: ArqRedis = pinned_client(
        None,
        settings,
        None,
        client_class=ArqRedis,
        mixin=_ArqKeysUnderPrefix,
        bounded=False,
        arq_base=Keys(settings.prefix).base + ":",
        decode_responses=False,  # arq reads bytes
    )
    client.job_serializer = dumps
    client.job_deserializer = loads
    client.default_queue_name = queue
    return client


async def arq_pool(settings: Settings, queue: str) -> ArqRedis:
    return arq_client(settings, queue)


def worker_options(settings: Settings, queue: str) -> dict[str, Any]:
    """What every askq arq worker is given: its queue, JSON jobs, the poll delay, and
    no results kept (nobody reads them)."""
    return {
        "redis_pool": arq_client(settings, queue),
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
    # The poll loop first, and wait for it: close() cancels it but does not wait, and
    # a poll still running when close() has dropped the pool fails on a pool of None.
    main: asyncio.Task[None] | None = getattr(worker, "main_task", None)
    if main is not None:
        await _cancel_until_done(main)
    with contextlib.suppress(asyncio.CancelledError):
        await worker.close()


async def _cancel_until_done(task: asyncio.Task[Any], tries: int = 50) -> None:
    """Cancel a task until it ends (bounded: `tries` x 0.1 s). arq's poll loop can absorb
    one cancellation (seen under load: it went on polling, and whatever awaited it hung),
    so one cancel() is not enough; at its next await the next one ends it."""
    for _ in range(tries):
        if task.done():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    log.warning("an arq worker's poll loop did not stop when cancelled")


async def _run(worker: Worker) -> None:
    """`worker.async_run()`, but a cancellation of ours ends the wait at once (awaiting
    arq's poll task directly would wait for it to end, and it may absorb the cancel)."""
    running = asyncio.ensure_future(worker.async_run())
    try:
        await asyncio.wait({running})
    except asyncio.CancelledError:
        await _cancel_until_done(running)
        raise
    running.result()


async def run_supervised(name: str, make_worker: Callable[[], Worker]) -> None:
    """Run an arq worker until cancelled, through Redis restarts and a full Redis: arq's
    poll loop ends on a lost connection or a refused write, so a new worker is started
    (with backoff) in its place. Jobs are in Redis, so one cut short runs again."""
    backoff = 0.1
    while True:
        raise_if_cancelled()
        worker = make_worker()
        try:
            await _run(worker)
            return
        except CONNECTION_ERRORS as exc:
            outage.failed(name, exc)  # logged once per outage (_outage.py)
            log.debug("%s lost Redis (%s); restarting in %.1f s", name, exc, backoff)
        except ResponseError as exc:
            if is_full(exc):  # arq's own writes refused (PSETEX ...): said once an episode
                episode.refused("queue", f"the queue of {name} (arq)")
            elif failover_reply(exc):  # Sentinel: a master failing over (_sentinel.py)
                outage.failed(name, exc)
                log.debug("%s: Redis fails over (%s); restarting in %.1f s", name, exc, backoff)
            else:
                raise
        finally:
            with contextlib.suppress(Exception):
                await close_worker(worker)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
