"""A caller process's side of its asks, shared by all of them: the reply waiter (one
blocking connection for every pending ask), the process's heartbeat while any ask
waits, the agents it keeps live, the bound on asks being published at once, and the
withdrawal of an ask (retried in the background while Redis is out of reach).

Each ask is a `PendingAsk` (`_pending.py`) that uses this; `Asking` (`_asking.py`) is
this plus what a caller does besides asking (abort a turn, keep an agent live, reap a
caller that is gone). Nothing here knows a single ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from redis.asyncio import Redis

from ..protocol._checks import duration_ms
from ..protocol._errors import AskError, ErrorCode
from ..protocol._messages import WITHDRAWN_MESSAGE
from ..protocol._models import Settlement
from ..protocol._reasons import CancelReason
from ..protocol._replies import Reply
from ..protocol._settings import Settings
from ..redis._heartbeat import keep_beating
from ..redis._keys import Keys
from ..redis._pipeline import MAX_BATCH
from ..redis._requests import Requests
from ..redis._scripts import RequestFacts, Scripts
from ._waiter import ReplyWaiter

log = logging.getLogger("askq.seam")

PUBLISHING = 2 * MAX_BATCH


class CallerProcess:
    def __init__(
        self,
        scripts: Scripts,
        requests: Requests,
        settings: Settings,
        process_id: str,
        connect: Callable[[], Redis],
        *,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.scripts = scripts
        # A new request id (with several shards, one naming this shard: _shards.py).
        self.new_id = new_id or (lambda: uuid.uuid4().hex)
        self.requests = requests
        self.redis = scripts.redis
        self.keys: Keys = scripts.keys
        self.settings = settings
        self.process_id = process_id
        self.inbox = self.keys.inbox(process_id)  # this process's, shared by its asks
        self.waiter = ReplyWaiter(
            connect,
            self.inbox,
            self.keys.reply,
            settings.block_seconds,
            self.keys.request,
        )
        self.agents: dict[str, str | None] = {}  # agents kept live here -> their owner
        # Asks being published at once (PendingAsk.publish). A send holds its script
        # call's keys and arguments (~4 KB) until its pipeline goes out; 100,000 asks
        # started at once would hold them all at the same moment, and the process's
        # peak memory with them. Two pipelines' worth keeps Redis busy all the same.
        self.publishing = asyncio.Semaphore(PUBLISHING)
        self._beating: asyncio.Future[None] | None = None
        self._background: set[asyncio.Future[Any]] = set()

    # --- withdrawing -------------------------------------------------------------------

    async def cancel(
        self,
        request_id: str,
        code: ErrorCode,
        message: str,
        *,
        by: str,
        reason: CancelReason = CancelReason.WITHDRAWN,
        facts: RequestFacts | None = None,
    ) -> bool:
        """Settle a pending request as CANCELLED; False if it had already settled.
        `facts`: its keys' facts, when the caller has them (else they are read)."""
        body = Settlement(state="CANCELLED", code=code, message=message, by=by)
        reply = await self.scripts.cancel(
            request_id,
            code.value,
            body.model_dump_json(exclude_none=True),
            by,
            reason.value,
            facts,
        )
        return reply.kind is Reply.CANCELLED

    async def withdraw(self, request_id: str, facts: RequestFacts | None = None) -> bool:
        """The caller gives up on its ask (signal, cancelled task, or a publication it
        could not confirm). Shielded, so it completes even while the caller's task is
        being cancelled. True once Redis has it (or nothing was left to withdraw);
        False when Redis is out of reach: it is then retried in the background until it
        lands, so a question nobody waits for does not stay answerable."""
        return await asyncio.shield(self._withdraw_once(request_id, facts, retry_later=True))

    async def _withdraw_once(
        self, request_id: str, facts: RequestFacts | None, *, retry_later: bool
    ) -> bool:
        try:
            await self.cancel(
                request_id, ErrorCode.ABORTED, WITHDRAWN_MESSAGE, by="caller", facts=facts
            )
        except AskError as exc:
            if exc.code is ErrorCode.REDIS_UNAVAILABLE:
                if retry_later:
                    self.spawn(self._withdraw_later(request_id, facts))
                return False
            if exc.code is not ErrorCode.NOT_FOUND:  # NOT_FOUND: it was never published
                log.warning("could not withdraw %s: %s", request_id, exc)
        return True

    async def _withdraw_later(self, request_id: str, facts: RequestFacts | None) -> None:
        pause = 0.1
        while not await self._withdraw_once(request_id, facts, retry_later=False):
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    def keep_alive(self) -> None:
        """Heartbeat this caller process while it waits on asks, so the sweeper can tell
        a caller that is gone (its asks are cancelled) from one that is waiting."""
        if self._beating is not None and not self._beating.done():
            return
        key, ttl = self.keys.alive(self.process_id), self.settings.caller_ttl

        async def beat() -> None:
            await renew(self.redis, key, "1", duration_ms(ttl, "caller_ttl"))

        async def run() -> None:
            period = ttl / 3
            while self.waiter.pending:
                # Every ask marks this process live itself (ask.lua), so asks that come
                # one after another need no beat of their own: only a period with asks
                # waiting all along does (it was a SET per ask, a third of a sequential
                # caller's CPU).
                try:
                    await asyncio.wait_for(self.waiter.idle.wait(), period)
                except TimeoutError:
                    await keep_beating("caller", beat, period, stop=self.waiter.idle)
                if self.waiter.pending:
                    continue  # a new ask came in meanwhile (and marked the process live)
                # Nothing left to wait on: leave no trace (the script keeps the keys if
                # an ask got in meanwhile, and so does this loop).
                with contextlib.suppress(AskError):
                    await self.forget_caller()

        self._beating = asyncio.ensure_future(run())

    async def forget_caller(self, process_id: str | None = None) -> None:
        """Unregister a caller process with no ask pending (lua/forget_caller): this one,
        as it leaves (a process with asks pending is kept)."""
        await self.scripts.forget_caller(process_id or self.process_id)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def aclose(self) -> None:
        beating = self._beating is not None
        for task in [*self._background, *filter(None, [self._beating])]:
            task.cancel()
        if beating and not self.waiter.pending:
            with contextlib.suppress(Exception):
                await self.forget_caller()  # a clean exit leaves no trace
        await self.waiter.aclose()



async def renew(redis: Redis, key: str, value: str, ttl_ms: int) -> None:
    """A heartbeat key live for `ttl_ms` more: its expiry renewed (PEXPIRE adds no data,
    so a full Redis takes it, and a process is not taken for gone because Redis was
    full: `_full.py`), or written anew once it lapsed."""
    if not await redis.pexpire(key, ttl_ms):
        await redis.set(key, value, px=ttl_ms)
