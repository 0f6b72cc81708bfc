"""What one replica shows, and taking it back: the questions its channel presented, and
the loop that reads the events stream (XREAD BLOCK, from its own position) to retract
those that settled elsewhere, were cancelled or escalated, and to remind.

A replica that shows nothing does not read the events stream: it waits until it shows
something, then catches up without a gap (what settled before is caught by checking
what it shows against its request's state). After a gap in the stream (a reconnect),
the same check runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from redis.asyncio import Redis

from ..protocol._models import TERMINAL, Offer, RequestState, Retraction
from ..redis._keys import Keys
from ..redis._requests import Requests
from ..redis._shards import Layout

# (hook name, request id, the hook's coroutine): run in a task of its own, bounded.
HookRunner = Callable[[str, str, Coroutine[Any, Any, Any]], None]
EVENTS_BATCH = 256


class Shown:
    def __init__(
        self,
        group: str,
        priority: int,
        keys: Keys,
        requests: Requests,
        retract: Callable[[Retraction], Coroutine[Any, Any, Any]],
        remind: Callable[[Offer], Coroutine[Any, Any, Any]],
        run_hook: HookRunner,
        block_ms: int,
        *,
        on_retract: Callable[[Offer, Retraction], None] | None = None,
        on_remind: Callable[[Offer], None] | None = None,
    ) -> None:
        self.group = group
        self.priority = priority
        self.keys = keys
        self.requests = requests
        self.offers: dict[str, Offer] = {}  # request id -> the offer its channel shows
        self._retract_hook = retract
        self._remind_hook = remind
        self._run_hook = run_hook
        self._on_retract = on_retract  # counted and logged by the runtime
        self._on_remind = on_remind
        self._block_ms = block_ms
        self._from = "$"  # the events stream position this replica has read up to
        self._showing = asyncio.Event()  # set while this replica shows something

    def start_from(self, event_id: str) -> None:
        self._from = event_id

    def show(self, offer: Offer) -> None:
        self.offers[offer.request_id] = offer
        self._showing.set()

    def take(self, request_id: str) -> Offer | None:
        return self.offers.pop(request_id, None)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.offers

    async def read(self, conn: Redis) -> None:
        """One turn of the events loop."""
        if not self.offers:
            # Nothing shown here, so nothing to retract or remind: wait for something to
            # be shown instead of waking for every settlement (an answerer that answers
            # at once, like auto, would otherwise wake once per ask for nothing).
            self._showing.clear()
            await self._showing.wait()
            last = await conn.xrevrange(self.keys.events, count=1)
            await self.resync(conn)
            self._from = last[0][0] if last else "0-0"
        reply = await conn.xread(
            {self.keys.events: self._from}, count=EVENTS_BATCH, block=self._block_ms
        )
        for _, entries in reply or []:
            for event_id, fields in entries:
                self._from = event_id
                self._on_event(fields)

    def _on_event(self, fields: dict[str, Any]) -> None:
        request_id = fields.get("request", "")
        offer = self.offers.get(request_id)
        if offer is None or fields.get("group", self.group) != self.group:
            return  # not shown here, or another group's reminder or escalation
        state = fields.get("state", "")
        if state == "REMIND":
            if self._on_remind is not None:
                self._on_remind(offer)
            self._run_hook("remind", request_id, self._remind_hook(offer))
            return
        if state == "OFFERED" and fields.get("tier") == str(self.priority):
            return
        # ESCALATED: the claim passed on to another tier, as an OFFERED event says too.
        self.retract(
            Retraction(
                request_id=request_id,
                state=RequestState.OFFERED if state == "ESCALATED" else RequestState(state),
                code=fields.get("code") or None,
                by=fields.get("by") or None,
                cause=fields.get("reason") or None,
            )
        )

    def retract(self, retraction: Retraction) -> None:
        """Take back a question this replica shows. One it no longer shows is left
        alone: its channel took it (its own answer, a release) since the state that
        says so was read, and must not be told it lost what it answered."""
        offer = self.offers.pop(retraction.request_id, None)
        if offer is None:
            return
        if self._on_retract is not None:
            self._on_retract(offer, retraction)
        self._run_hook("retract", retraction.request_id, self._retract_hook(retraction))

    async def resync(self, conn: Redis) -> None:
        """After a gap in the events stream, check what is shown is still this group's.
        (What was taken while its row was read is not retracted: `retract`.)"""
        for request_id in list(self.offers):
            row = await self.requests.row(request_id, conn)
            if row is None or row.state in TERMINAL or self.group not in row.claimers:
                self.retract(
                    Retraction(
                        request_id=request_id,
                        state=row.state if row is not None else RequestState.FAILED,
                        code=(row.code if row is not None else "") or None,
                        by=(row.by if row is not None else "") or None,
                        cause=(row.reason if row is not None else "") or None,
                    )
                )


class ShownInShards:
    """What a replica shows, over its shards (one `Shown` each, following that shard's
    events): the GroupHandle's take and restore go to the shard of the request."""

    def __init__(self, shards: list[Shown], layout: Layout) -> None:
        self._shards = shards
        self._layout = layout

    def _of(self, request_id: str) -> Shown:
        return self._shards[self._layout.of_request(request_id)]

    @property
    def offers(self) -> dict[str, Offer]:
        return {k: v for shown in self._shards for k, v in shown.offers.items()}

    def show(self, offer: Offer) -> None:
        self._of(offer.request_id).show(offer)

    def take(self, request_id: str) -> Offer | None:
        return self._of(request_id).take(request_id)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._of(request_id)
