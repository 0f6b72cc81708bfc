"""`ask_user_question` as one blocking MCP call: it waits until the question settles,
sending progress while it waits, and survives a dropped stream.

The ask runs in a task of its own, outside the call's cancel scope, so the call and
the question can end apart:

- the client cancels (`notifications/cancelled`): the question is withdrawn at once;
- the stream drops or the session ends (2026-era HTTP: closing the response stream is
  the cancellation): the question is withdrawn after `reattach_grace`, unless a call
  re-issued meanwhile (a new JSON-RPC id, on any replica) attached to it;
- a re-issued call finds the same request through askq's idempotency key: the
  client's `io.askq/toolCallId` within the conversation, or a digest of the agent, the
  conversation and the arguments, plus the id of the last request those settled as
  (kept in Redis), so the same question asked again after it was answered, or after
  its call was cancelled, is a new question, not the old answer or the withdrawal. (A
  question answered while its call was dropped is the answer the re-issued call gets:
  the human is never asked twice.)

The conversation (a turn the client names, else the session) is what makes a key
unique per run: a call id repeats from run to run (a test model's `call_1`), and so do
arguments. A call with no conversation (2026-era HTTP naming no turn) has no key: it
is asked on its own, and withdrawn at once when dropped (nothing could reattach).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from askq import AskError, AskUserQuestionTool, ChannelStore, ErrorCode, ToolResult
from askq.seam._tool import tool_call_key

from ._identity import Who
from ._settings import McpSettings

log = logging.getLogger("askq.mcp")


class BlockingCalls:
    def __init__(
        self, tool: AskUserQuestionTool, store: ChannelStore, settings: McpSettings
    ) -> None:
        self.tool = tool
        self.store = store
        self.settings = settings
        self._asks: set[asyncio.Task[ToolResult]] = set()
        # dropped calls' asks -> (their withdrawal timer, key, the call's token)
        self._grace: dict[asyncio.Task[ToolResult], tuple[asyncio.TimerHandle, str, str]] = {}
        self._reattached: set[asyncio.Task[ToolResult]] = set()
        self._background: set[asyncio.Future[Any]] = set()
        self._no_grace = asyncio.Event()  # set while no dropped call is in its grace
        self._no_grace.set()

    async def _key(self, who: Who, args: Any) -> tuple[str | None, str | None]:
        """The idempotency key of this call (None: it has none), and the generation
        record it moves on."""
        if not who.conversation:  # no run to make a call id or arguments unique in
            if who.tool_call_id is not None:
                raise AskError(
                    ErrorCode.INVALID_REQUEST,
                    "io.askq/toolCallId: a call id is unique only within its run; name the"
                    " run with io.askq/turn (or the Askq-Turn header) to reattach by it",
                )
            return None, None
        if who.tool_call_id is not None:  # the client's own id for the call: stable
            key = tool_call_key(who.caller.agent_id, who.conversation, who.tool_call_id)
            return key, None
        base = who.reattach_base(args)
        (after,) = await self.store.fields(f"gen:{base}", "after")
        key = f"mcp:{base}:{after or '-'}"
        seam = self.tool.seam
        request_id = await seam.idempotent_request(key)
        if request_id is not None:
            settled = await seam.settlement(request_id)
            if settled is not None and settled.state == "CANCELLED" and settled.by == "caller":
                # Withdrawn (a cancelled or dropped call) before its ask could record
                # it: calling again is asking again, not reading the withdrawal.
                await self.store.set_fields(f"gen:{base}", {"after": request_id})
                key = f"mcp:{base}:{request_id}"
        return key, base

    async def call(
        self,
        who: Who,
        args: Any,
        report: Callable[[int], Awaitable[None]],
        cancel_requested: Callable[[], bool],
    ) -> ToolResult:
        """Ask and wait. `report(n)`: send progress n (1, 2, ...); `cancel_requested()`:
        whether the client cancelled the call explicitly (else it was dropped)."""
        try:
            key, base = await self._key(who, args)
            token = uuid.uuid4().hex
            if key is not None:
                await self.store.set_fields(f"att:{key}", {"by": token})
        except AskError as exc:
            return ToolResult(content=str(exc), is_error=True, code=exc.code)
        task = asyncio.ensure_future(self._ask(args, who, key, base))
        self._asks.add(task)
        task.add_done_callback(self._asks.discard)
        try:
            sent = 0
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.settings.progress_interval)
                if done:
                    return task.result()
                sent += 1
                try:
                    await report(sent)
                except Exception:  # noqa: BLE001 - a stream that cannot take it: keep waiting
                    log.debug("progress %d not sent", sent, exc_info=True)
        except asyncio.CancelledError:
            if cancel_requested() or key is None:
                task.cancel()  # withdrawn everywhere (the answerers retract)
            else:
                self._withdraw_later(task, key, token)
            raise

    async def _ask(self, args: Any, who: Who, key: str | None, base: str | None) -> ToolResult:
        result: ToolResult | None = None
        try:
            result = await self.tool.execute(args, who.caller, idempotency_key=key)
            return result
        finally:
            if key is not None and base is not None:
                # Before the result goes back: the model may ask the same at once.
                await self._settled(
                    key, base, surely=result is not None and not _maybe_open(result)
                )

    async def _settled(self, key: str, base: str, *, surely: bool) -> None:
        """The request under `key` settled: the same arguments ask anew from now on.
        `surely`: the ask ended with the request's own settlement; otherwise (ABORTED,
        a cancelled task) it may still be open: a re-issued call took it over."""
        seam = self.tool.seam
        try:
            request_id = await seam.idempotent_request(key)
            if request_id is None:
                return
            if surely or await seam.settlement(request_id) is not None:
                await self.store.set_fields(f"gen:{base}", {"after": request_id})
        except AskError as exc:
            log.warning("could not record the settlement of %s: %s", key, exc)

    # --- dropped calls -------------------------------------------------------------------

    def _withdraw_later(self, task: asyncio.Task[ToolResult], key: str, token: str) -> None:
        if task.done():
            return
        handle = asyncio.get_running_loop().call_later(
            self.settings.reattach_grace,
            lambda: self._spawn(self._withdraw_unless_reattached(task)),
        )
        self._grace[task] = (handle, key, token)
        self._no_grace.clear()
        # Ended meanwhile (answered, or taken over by a re-issued call): nothing to decide.
        task.add_done_callback(self._out_of_grace)

    def _out_of_grace(self, task: asyncio.Task[ToolResult]) -> tuple[Any, ...] | None:
        dropped = self._grace.pop(task, None)
        if dropped is not None:
            dropped[0].cancel()
        if not self._grace:
            self._no_grace.set()
        return dropped

    async def wait_out_grace(self, stop: asyncio.Event) -> None:
        """Until no dropped call is in its grace (each re-issued elsewhere, answered, or
        withdrawn once its grace ended), or `stop` is set: a server whose client went
        away keeps its dropped calls' questions for a restarted client to reattach to."""
        stopping = asyncio.ensure_future(stop.wait())
        graced = asyncio.ensure_future(self._no_grace.wait())
        try:
            await asyncio.wait({stopping, graced}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            graced.cancel()
        if self._background:  # the withdrawals the grace ended with
            await asyncio.gather(*self._background, return_exceptions=True)

    async def _withdraw_unless_reattached(self, task: asyncio.Task[ToolResult]) -> None:
        dropped = self._out_of_grace(task)
        if dropped is None or task.done():
            return
        handle, key, token = dropped
        try:
            (latest,) = await self.store.fields(f"att:{key}", "by")
        except AskError:
            latest = None  # cannot tell: withdraw, as a dropped call asks
        if latest in (None, token):
            task.cancel()
        else:  # a re-issued call waits on the same request; this task ends with it
            self._reattached.add(task)
            task.add_done_callback(self._reattached.discard)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        future = asyncio.ensure_future(coro)
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        """The server stops: dropped calls are decided now (withdrawn unless a re-issued
        call took them over), and asks still waiting are withdrawn."""
        for task in list(self._grace):
            self._spawn(self._withdraw_unless_reattached(task))
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        waiting = self._asks - self._reattached  # a re-issued call's ask ends with the seam
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.gather(*waiting, return_exceptions=True)


def _maybe_open(result: ToolResult) -> bool:
    """An ask that ended ABORTED may have left its request open (taken over by another
    call, or this server's seam closing), and so may one that failed unexpectedly; any
    other outcome is the request's own settlement (or there is no request)."""
    return result.code in (ErrorCode.ABORTED, ErrorCode.INTERNAL, ErrorCode.REDIS_UNAVAILABLE)
