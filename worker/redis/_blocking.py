"""A loop of blocking reads on a connection of its own (the reply waiter's BLPOP, a
worker's XREADGROUP and XREAD), written once.

It reconnects with backoff after a connection error and calls `resync` first thing
after, since a notification may have been lost with the connection. It stops
promptly on `close()`, even when the client library swallows the cancellation (redis-py
can, when a cancel races its own read timeout): closing the connection fails the read,
and the loop sees it is closing. An outage is logged once per process, as it starts
and as it ends (`_outage.py`), not once per try.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from ._full import episode, is_full
from ._outage import outage, unreachable

log = logging.getLogger("askq.blocking")

Step = Callable[[Redis], Awaitable[None]]


def raise_if_cancelled() -> None:
    """Raise the cancellation a library swallowed.

    redis-py (on Python 3.11) can lose a cancel that races one of its own internal
    waits: the awaited command returns or fails as if nothing happened, and a retrying
    loop would run forever. The task still counts the cancel request, so every loop
    here checks it once per turn.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class BlockingLoop:
    def __init__(
        self,
        name: str,
        connect: Callable[[], Redis],
        step: Step,
        resync: Step | None = None,
        *,
        resync_first: bool = False,
    ) -> None:
        self.name = name
        self._connect = connect
        self._step = step
        self._resync = resync
        self._resync_first = resync_first
        self._conn: Redis | None = None
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._closing = False
            self._task = asyncio.create_task(self._run(), name=self.name)
        return self._task

    async def _run(self) -> None:
        backoff = 0.05
        resync = self._resync_first
        while not self._closing:
            raise_if_cancelled()
            if self._conn is None:
                self._conn = self._connect()
            try:
                if resync and self._resync is not None:
                    await self._resync(self._conn)
                resync = False
                await self._step(self._conn)
                backoff = 0.05
                outage.reached()
            except Exception as exc:  # noqa: BLE001 - the loop outlives any one failure
                if self._closing:
                    return
                raise_if_cancelled()
                if is_full(exc):  # the connection is fine; said once an episode (_full.py)
                    episode.refused("blocking_loop", self.name)
                elif unreachable(exc):
                    outage.failed(self.name, exc)
                    log.debug("%s lost its connection (%s); reconnecting", self.name, exc)
                    await self._drop_conn()
                else:
                    log.exception("%s failed; retrying", self.name)
                resync = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.connection_pool.disconnect(inuse_connections=True)
            with contextlib.suppress(Exception):
                await conn.aclose()

    async def close(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if not done:  # the cancel was swallowed: fail the read instead
                await self._drop_conn()
                await asyncio.wait({task}, timeout=5)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop_conn()
