"""The reply waiter: one per process, however many asks are pending.

Each pending ask is a future of its own (asks waiting on the same request, an
idempotent ask repeated, each get one, so one that gives up never ends another's
wait). A settlement script pushes `<request id> <settlement>`
onto the inbox list of the caller's process; this loop is the only reader of that
inbox, on one dedicated connection, blocked in BLPOP, so a settlement wakes its caller
at once and a pending ask costs no connection and no polling.

The reply key stays the truth: if the loop loses its connection (a notification may
be lost with it), it re-reads the reply keys of every pending ask once reconnected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..protocol._errors import AskError, ErrorCode
from ..protocol._messages import LOST, closed
from ..protocol._models import Settlement
from ..redis._blocking import BlockingLoop

DRAIN_BATCH = 512


class ReplyWaiter:
    def __init__(
        self,
        connect: Callable[[], Redis],
        inbox: str,
        reply_key: Callable[[str], str],
        block_seconds: float,
        request_key: Callable[[str], str],
    ) -> None:
        self._inbox = inbox
        self._reply_key = reply_key
        self._request_key = request_key
        self._block_seconds = block_seconds
        self._futures: dict[str, list[asyncio.Future[Settlement]]] = {}
        self._published: set[str] = set()
        self.idle = asyncio.Event()  # set while no ask waits here
        self.idle.set()
        self._blmpop = True
        self._loop = BlockingLoop("askq-reply-waiter", connect, self._step, self._resync)

    @property
    def pending(self) -> int:
        return len(self._futures)

    def pending_ids(self) -> list[str]:
        return list(self._futures)

    def expect(self, request_id: str) -> asyncio.Future[Settlement]:
        """Register interest before the request is published, so no wake-up is missed.
        Every ask gets its own future, even on a request another ask waits on."""
        future: asyncio.Future[Settlement] = asyncio.get_running_loop().create_future()
        self._futures.setdefault(request_id, []).append(future)
        self.idle.clear()
        if not self._loop.running:
            self._loop.start()
        return future

    def published(self, request_id: str) -> None:
        """The request is in Redis now: if it vanishes, its ask fails (see _resync)."""
        if request_id in self._futures:
            self._published.add(request_id)

    def forget(self, request_id: str, future: asyncio.Future[Settlement]) -> None:
        """This ask stops waiting; others waiting on the same request go on."""
        waiting = self._futures.get(request_id, [])
        if future in waiting:
            waiting.remove(future)
            if not waiting:
                self._take(request_id)
        if not future.done():
            future.cancel()

    def _take(self, request_id: str) -> list[asyncio.Future[Settlement]]:
        self._published.discard(request_id)
        futures = self._futures.pop(request_id, [])
        if not self._futures:
            self.idle.set()
        return futures

    def _deliver(self, request_id: str, body: str) -> None:
        futures = [f for f in self._take(request_id) if not f.done()]
        if not futures:
            return  # settled for an ask this process gave up on, or a duplicate wake-up
        try:
            settlement = Settlement.model_validate_json(body)
        except ValueError as exc:  # a corrupt reply must fail its asks, not the loop
            for future in futures:
                future.set_exception(AskError(ErrorCode.INTERNAL, f"unreadable reply: {exc}"))
            return
        for future in futures:
            future.set_result(settlement)

    async def _pop(self, conn: Redis) -> list[str]:
        """Block until the inbox has items, then take up to a batch in the same call
        (BLMPOP, Redis 7); on an older server, BLPOP and drain with LPOP."""
        if self._blmpop:
            try:
                # redis-py's stub types the key as a list; it is spread as key names.
                inbox: Any = self._inbox
                reply = await conn.blmpop(  # type: ignore[misc]
                    self._block_seconds, 1, inbox, direction="LEFT", count=DRAIN_BATCH
                )
                return list(reply[1]) if reply else []
            except ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                self._blmpop = False
        item = await conn.blpop([self._inbox], timeout=max(1, round(self._block_seconds)))  # type: ignore[misc]
        if item is None:
            return []
        more = await conn.lpop(self._inbox, DRAIN_BATCH)  # type: ignore[misc]
        return [item[1], *(more or [])]

    async def _step(self, conn: Redis) -> None:
        for raw in await self._pop(conn):
            request_id, _, body = raw.partition(" ")
            self._deliver(request_id, body)

    async def _resync(self, conn: Redis) -> None:
        await self.recheck(conn, list(self._futures))

    async def recheck(self, conn: Redis, ids: list[str]) -> None:
        """Deliver what settled while nobody listened (reply keys); fail the asks whose
        request Redis no longer has at all (it lost its data), rather than wait forever."""
        for start in range(0, len(ids), DRAIN_BATCH):
            batch = ids[start : start + DRAIN_BATCH]
            bodies = await conn.mget([self._reply_key(i) for i in batch])
            published = []
            for request_id, body in zip(batch, bodies, strict=True):
                if body is not None:
                    self._deliver(request_id, body)
                elif request_id in self._published:
                    published.append(request_id)
            if not published:
                continue
            async with conn.pipeline(transaction=False) as pipe:
                for request_id in published:
                    pipe.exists(self._request_key(request_id), self._reply_key(request_id))
                found = await pipe.execute()
            for request_id, exists in zip(published, found, strict=True):
                if not exists:
                    self._deliver(request_id, LOST)

    async def aclose(self) -> None:
        """Stop; an ask still waiting ends with `closed` (an AskError), not with a
        cancellation its own task never asked for."""
        await self._loop.close()
        for request_id in list(self._futures):
            for future in self._take(request_id):
                if not future.done():
                    future.set_exception(closed())
