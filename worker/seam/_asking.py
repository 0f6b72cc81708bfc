"""The caller side, as `Seam` uses it: ask, withdraw, abort a turn, keep agents live,
reap a caller process that is gone.

`Asking` is the process's `CallerProcess` (`_caller.py`: the reply waiter, the
heartbeat, the withdrawals) plus those; each ask's life is `_pending.ask`, which
`Asking.ask` hands the ask to: one way, the ask never calls back here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

from ..protocol._checks import duration_ms
from ..protocol._errors import ErrorCode
from ..protocol._messages import ABORTED_MESSAGE, CALLER_GONE_MESSAGE
from ..protocol._models import Answers, AskInput, Caller, Question, Settlement
from ..protocol._reasons import CancelReason
from ..protocol._replies import Reply
from ..redis._connections import CONNECTION_ERRORS, redis_errors
from ..redis._heartbeat import keep_beating
from ._caller import CallerProcess, renew
from ._pending import ask


class Asking(CallerProcess):
    def ask(
        self,
        questions: AskInput | Mapping[str, Any] | Sequence[Question | Mapping[str, Any]] | str,
        caller: Caller,
        **options: Any,
    ) -> Coroutine[Any, Any, Answers]:
        """One ask (`_pending.ask`, with `Seam.ask`'s options): its coroutine as it is,
        not one around it, as `Seam.ask` returns it (a frame per pending ask more is
        megabytes over 100,000 asks)."""
        return ask(self, questions, caller, new_id=self.new_id, **options)

    async def abort_turn(self, turn_id: str, *, by: str = "abort") -> int:
        """Mark the turn aborted (durably, first), then cancel its pending requests.
        Returns how many this call cancelled."""
        body = Settlement(
            state="CANCELLED", code=ErrorCode.ABORTED, message=ABORTED_MESSAGE, by=by
        ).model_dump_json(exclude_none=True)
        reply = await self.scripts.abort_turn(turn_id, body, by)
        return int(reply.value(0, "0"))

    @contextlib.asynccontextmanager
    async def agent(self, agent_id: str, owner: str | None = None) -> AsyncIterator[None]:
        """Keep an agent registered as live (with its owner) while the block runs."""
        key = self.keys.agent(agent_id)
        ttl_ms = duration_ms(self.settings.agent_ttl, "agent_ttl")

        async def beat() -> None:
            await renew(self.redis, key, owner or "", ttl_ms)

        with redis_errors(self.settings):
            await self.redis.set(key, owner or "", px=ttl_ms)
        self.agents[agent_id] = owner
        period = self.settings.agent_ttl / 3
        task = asyncio.create_task(_beat_later(f"agent {agent_id}", beat, period))
        try:
            yield
        finally:
            task.cancel()
            self.agents.pop(agent_id, None)
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.redis.delete(key)

    async def reap_caller(self, process_id: str) -> int | None:
        """The sweeper, for a caller process whose heartbeat lapsed: its pending asks
        cancelled (by "caller gone") and the process forgotten, in one step that first
        checks again that it is not live (lua/reap_caller). Returns how many it
        cancelled; None when the process is live again (it asked meanwhile)."""
        body = Settlement(
            state="CANCELLED", code=ErrorCode.ABORTED, message=CALLER_GONE_MESSAGE, by="caller gone"
        ).model_dump_json(exclude_none=True)
        reply = await self.scripts.reap_caller(
            process_id,
            ErrorCode.ABORTED.value,
            body,
            "caller gone",
            CancelReason.CALLER_GONE.value,
        )
        if reply.kind is Reply.LIVE:
            return None
        return int(reply.value(0, "0"))


async def _beat_later(
    name: str, beat: Callable[[], Coroutine[Any, Any, None]], period: float
) -> None:
    await asyncio.sleep(period)  # the first beat was written already
    await keep_beating(name, beat, period)
