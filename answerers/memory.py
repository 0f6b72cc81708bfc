"""An answerer that lives in memory: what httpx's MockTransport is to httpx.

Tests (yours and ours) run a real worker loop with it and drive the human's side
directly: see what was offered and presented, answer, release, watch retractions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from askq import Answerer, AnswererOptions, Offer, Retraction


class MemoryAnswerer(Answerer[AnswererOptions]):
    kind = "memory"

    def __init__(
        self,
        *,
        accept: bool | Callable[[Offer], bool] = True,
        reply: Callable[[Offer], Any] | None = None,
        by: str = "memory",
    ) -> None:
        """`accept`: the decision (or a function of the offer). `reply`: if given, every
        presented offer is answered at once with `reply(offer)` (a rules-like tier)."""
        super().__init__()
        self._accept = accept
        self._reply = reply
        self.by = by
        self.decided: list[tuple[Offer, bool]] = []
        self.presented: asyncio.Queue[Offer] = asyncio.Queue()
        self.retracted: asyncio.Queue[Retraction] = asyncio.Queue()

    async def decide(self, offer: Offer) -> bool:
        verdict = self._accept(offer) if callable(self._accept) else self._accept
        self.decided.append((offer, verdict))
        return verdict

    async def present(self, offer: Offer) -> None:
        self.presented.put_nowait(offer)
        if self._reply is not None:
            await self.group.answer(offer.request_id, self._reply(offer), by=self.by)

    async def retract(self, retraction: Retraction) -> None:
        self.retracted.put_nowait(retraction)

    async def next_presented(self, timeout: float = 5.0) -> Offer:
        return await asyncio.wait_for(self.presented.get(), timeout)

    async def next_retracted(self, timeout: float = 5.0) -> Retraction:
        return await asyncio.wait_for(self.retracted.get(), timeout)

    def answer(self, request_id: str, answers: Any, by: str | None = None) -> Awaitable[Any]:
        return self.group.answer(request_id, answers, by=by or self.by)
