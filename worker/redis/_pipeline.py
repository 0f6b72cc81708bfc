"""Auto-pipelining of the seam's scripts.

Every state transition is one script call. Sent one by one, each call costs a pool
checkout, a write syscall and a read of its own; a process with a thousand asks in
flight (or a replica answering a burst of offers) pays that a thousand times. Here the
calls made while a batch is on the wire wait for it, then go out together as the next
batch: one pipeline, one write, one read. A lone call goes out at once, so the batch
size follows the load and a quiet process pays nothing for it.

One batch is in flight at a time, so calls reach Redis in the order they were made (a
withdrawal queued after its ask runs after it). A call whose awaiting task is cancelled
still runs: the transitions are written to be safe either way, and a half-sent
pipeline would be worse. Nothing is re-sent after a lost connection: every call of the
batch fails with the connection's error, as a lone command would.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

log = logging.getLogger("askq.pipeline")

# A cap on one batch: a burst larger than this goes out as several (a huge pipeline
# would hold a reply buffer of its own size and delay its first result for all).
MAX_BATCH = 256


@dataclass
class _Call:
    script: AsyncScript
    keys: Sequence[Any]
    args: Sequence[Any]
    result: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class ScriptPipeline:
    """Runs `script(keys, args)` calls, batching those made while a batch is out."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._queue: deque[_Call] = deque()
        self._sender: asyncio.Task[None] | None = None
        self.batches = 0  # for tests and benchmarks: how many pipelines went out
        self.calls = 0

    async def call(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        call = _Call(script, keys, args)
        self._queue.append(call)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_all(), name="askq-script-pipeline")
            self._sender.add_done_callback(self._sender_done)
        # A cancelled caller cancels only its own future; the call still goes out.
        return await call.result

    async def aclose(self) -> None:
        """Let queued calls go out (they may be transitions that must happen)."""
        if self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)

    async def _send_all(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            try:
                await self._send(batch)
            except BaseException as exc:  # noqa: BLE001 - every caller gets the error
                for call in batch:
                    _settle(call, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise

    def _sender_done(self, sender: asyncio.Task[None]) -> None:
        # Cancelled (at shutdown), perhaps before it even started: what it left queued
        # is cancelled too, so no caller waits for a sender that is gone.
        if sender.cancelled():
            while self._queue:
                _settle(self._queue.popleft(), asyncio.CancelledError())

    async def _send(self, batch: list[_Call]) -> None:
        self.batches += 1
        self.calls += len(batch)
        if len(batch) == 1:  # no pipeline's bookkeeping for a lone call
            call = batch[0]
            _settle(call, await call.script(keys=call.keys, args=call.args))
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for call in batch:
                pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            results = await pipe.execute(raise_on_error=False)
        for call, result in zip(batch, results, strict=True):
            if isinstance(result, NoScriptError):
                # Redis lost its script cache (a restart): the script did not run, so
                # running it now (AsyncScript loads it first) is its first run.
                try:
                    result = await call.script(keys=call.keys, args=call.args)
                except Exception as exc:  # noqa: BLE001
                    result = exc
            _settle(call, result)


def _settle(call: _Call, result: Any) -> None:
    if call.result.done():  # its caller was cancelled and no longer waits
        return
    if isinstance(result, asyncio.CancelledError):  # the sender was (shutdown)
        call.result.cancel()
    elif isinstance(result, BaseException):
        call.result.set_exception(result)
    else:
        call.result.set_result(result)
