"""One replica's offers: read from its tier stream (first what it held before a
restart, then new ones, blocking), each handled in a task of its own (at most
`MAX_IN_FLIGHT` at once): decided by scope and by the answerer, then claimed and
presented, answered at once, or declined; an entry recovered from a dead replica is
presented again if the group holds its claim. An offer whose handling fails half-way is
passed on, never left undecided."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..protocol import _recorder, _tracing
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import AskRequest, Offer, scope_matches
from ..protocol._replies import Reply
from ..protocol._text import cut, visible
from ..redis._connections import CONNECTION_ERRORS
from ..redis._full import is_full
from ..redis._outage import outage
from ..redis._requests import RequestInfo
from ..seam._seam import Seam
from ..seam._sharded import Shard
from ._answerer import FINAL_REFUSALS, Answerer
from ._hooks import HookResult
from ._outcomes import Outcomes
from ._shown import Shown, ShownInShards

log = logging.getLogger("askq.runtime")

READ_COUNT = 64
MAX_IN_FLIGHT = 256
REREAD_AFTER = 2.0  # seconds: an offer refused because Redis was full is handled again

HookCall = Callable[[str, str, Coroutine[Any, Any, Any]], Awaitable[HookResult]]


def _is_answer_at_once(value: Any) -> bool:
    """What `Answerer.answer_at_once` promises besides None: (answers, who gave them)."""
    if not (isinstance(value, tuple) and len(value) == 2):
        return False
    return isinstance(value[1], str) and bool(value[1])


@dataclass(eq=False)
class Side:
    """A replica's part in one shard: the shard, what it shows from there, its tier
    stream, and where its re-read of its own pending entries stands."""

    shard: Shard
    shown: Shown
    stream: str
    own_cursor: str | None = "0"
    reread_due: bool = False  # a re-read of its own entries is scheduled

    async def reread_own(self, conn: Redis) -> None:
        self.own_cursor = "0"


@dataclass(eq=False)
class Offers:
    """The offers of one replica (`AnswererRuntime` runs its loops and its upkeep)."""

    seam: Seam
    answerer: Answerer[Any]
    group: str
    priority: int
    scope: dict[str, str]
    consumer: str
    shown: Shown | ShownInShards
    outcomes: Outcomes
    call_hook: HookCall
    register_again: Callable[[], Awaitable[None]]  # its consumer group is gone
    tasks: set[asyncio.Task[Any]]  # the runtime's, which it cancels as it stops
    block_ms: int
    in_flight: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(MAX_IN_FLIGHT)
    )

    async def read(self, side: Side, conn: Redis) -> None:
        # First what this consumer held before a restart (its own pending entries, from
        # id 0 on), then block for new offers.
        cursor = side.own_cursor  # (a re-read asked for meanwhile is the next read's)
        try:
            reply = await conn.xreadgroup(
                self.group,
                self.consumer,
                {side.stream: cursor or ">"},
                count=READ_COUNT,
                block=None if cursor else self.block_ms,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The consumer group is gone (Redis lost its data): register again now, not
            # at the next heartbeat, and read from there.
            await self.register_again()
            return
        entries = reply[0][1] if reply else []
        if cursor is not None:
            side.own_cursor = entries[-1][0] if entries else None
        for entry_id, fields in entries:
            if not fields:  # trimmed away; nothing to recover
                await self.seam.redis.xack(side.stream, self.group, entry_id)
                continue
            await self.spawn(side, entry_id, fields, recovered=cursor is not None)

    async def spawn(
        self, side: Side, entry_id: str, fields: dict[str, str], *, recovered: bool
    ) -> None:
        await self.in_flight.acquire()
        task = asyncio.create_task(self._handle_entry(side, entry_id, fields, recovered))
        self.tasks.add(task)

        def finished(t: asyncio.Task[None]) -> None:
            self.tasks.discard(t)
            self.in_flight.release()

        task.add_done_callback(finished)

    async def _handle_entry(
        self, side: Side, entry_id: str, fields: dict[str, str], recovered: bool
    ) -> None:
        request_id = fields.get("request", "")
        try:
            if recovered or "payload" not in fields:
                await self._handle_recovered(side, entry_id, request_id)
            else:
                request = AskRequest.model_validate_json(fields["payload"])
                self.seam.requests.remember(RequestInfo(request=request, inbox=fields["inbox"]))
                _recorder.recorder.offered(self.group, self.priority)
                await self._handle_offer(self._offer(entry_id, request))
        except (AskError, *CONNECTION_ERRORS) as exc:
            if isinstance(exc, AskError) and exc.code is not ErrorCode.REDIS_UNAVAILABLE:
                log.warning(
                    "offer %s of %s failed (%s); passing it on", request_id, self.group, exc
                )
                await self._pass_on(request_id, entry_id)
                return
            # Left pending: this replica (on restart) or another one recovers it.
            if is_full(exc):
                # Redis is full (said once an episode): this replica reads its own
                # pending entries again in a while, and handles it once Redis takes writes.
                self._reread_later(side)
                return
            outage.failed(f"offer {request_id} of {self.group}", exc)  # once per outage
        except Exception:  # noqa: BLE001 - one bad offer must not stop the worker
            log.exception("offer %s of %s failed; passing it on", request_id, self.group)
            await self._pass_on(request_id, entry_id)

    def _reread_later(self, side: Side) -> None:
        """Read this replica's own pending entries again after a pause (once, however
        many entries ask for it): what it could not handle while Redis was full."""
        if side.reread_due:
            return
        side.reread_due = True

        def due() -> None:
            side.reread_due = False
            side.own_cursor = "0"

        asyncio.get_running_loop().call_later(REREAD_AFTER, due)

    async def _pass_on(self, request_id: str, entry_id: str) -> None:
        """Handling an entry failed half-way (a bug, a refused answer): whatever the
        group holds of it, decline it or give the claim back, so it is not left
        undecided or claimed with nobody showing it."""
        answering = self.seam.answering
        try:
            reply = await answering.decline(request_id, self.group, self.priority, entry_id)
            if reply is Reply.CLAIMED:
                self.shown.take(request_id)
                await answering.release(request_id, self.group)
        except Exception as exc:  # noqa: BLE001 - left pending: recovery takes it
            log.warning("could not pass %s on: %s", request_id, exc)

    def _offer(self, entry_id: str, request: AskRequest) -> Offer:
        return Offer(
            request_id=request.id,
            group=self.group,
            tier=self.priority,
            offer_id=entry_id,
            questions=request.questions,
            scope=request.scope,
            caller=request.caller,
            created_ms=request.created_ms,
            trace=request.trace,
        )

    async def _handle_offer(self, offer: Offer) -> None:
        """A fresh offer: decide, then claim or decline. The scripts check that it is
        still this group's to decide (and acknowledge it when it is not). An answerer
        that fails, hangs or answers with something that is not an answer declines."""
        with _tracing.joined(
            "askq.offer", offer.trace, request_id=offer.request_id, group=self.group
        ):
            await self._decide_and_claim(offer)

    async def _decide_and_claim(self, offer: Offer) -> None:
        answering = self.seam.answering
        decline = (offer.request_id, offer.group, offer.tier, offer.offer_id)
        started = time.monotonic()
        if not await self._decide(offer):
            await answering.decline(*decline)
            self.outcomes.decided(offer, "declined", started)
            return
        at_once = await self.call_hook(
            "answer_at_once", offer.request_id, self.answerer.answer_at_once(offer)
        )
        if not at_once.ok:
            await answering.decline(*decline)
            self.outcomes.decided(offer, "declined", started)
        elif at_once.value is not None:
            if not _is_answer_at_once(at_once.value):
                log.error(
                    "%s: answer_at_once %s returned %s, not None or (answers, by: str); declining",
                    self.group,
                    offer.request_id,
                    cut(visible(repr(at_once.value)), 200),
                )
                await answering.decline(*decline)
                self.outcomes.decided(offer, "declined", started)
                return
            answers, by = at_once.value
            try:  # the answer in the trace, as a human's is (inside this offer's span)
                with _tracing.joined(
                    "askq.answer", offer.trace, request_id=offer.request_id, group=self.group, by=by
                ):
                    await answering.claim_and_answer(offer, answers, by=by)
            except AskError as exc:
                if exc.code is ErrorCode.INVALID_REQUEST:
                    log.warning("%s answer to %s refused: %s", self.group, offer.request_id, exc)
                    await answering.decline(*decline)
                    self.outcomes.decided(offer, "declined", started)
                elif exc.code not in FINAL_REFUSALS:
                    raise
            else:
                self.outcomes.decided(offer, "answered", started)
                self.outcomes.settled(offer.request_id, "answered", by, offer.created_ms)
        elif await answering.accept(offer):
            self.outcomes.decided(offer, "accepted", started)
            await self._present(offer)

    async def _handle_recovered(self, side: Side, entry_id: str, request_id: str) -> None:
        """An entry that was pending on this or a dead replica: it may be a claim of the
        group (present it again, without deciding) or an offer not yet decided."""
        requests = side.shard.requests
        row = await requests.row(request_id) if request_id else None
        if row is None or not row.offered_to(self.group, self.priority, entry_id):
            await self.seam.redis.xack(side.stream, self.group, entry_id)  # no longer ours
            return
        try:
            request = await requests.request(request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            await self.seam.redis.xack(side.stream, self.group, entry_id)  # expired meanwhile
            return
        offer = self._offer(entry_id, request)
        if self.group in row.claimers:
            await self._present(offer)
        else:
            await self._handle_offer(offer)

    async def _decide(self, offer: Offer) -> bool:
        """The scope selector, then the answerer's `decide` (True or False; anything
        else, an error or a hang declines)."""
        if not scope_matches(self.scope, offer.scope):
            return False
        verdict = await self.call_hook("decide", offer.request_id, self.answerer.decide(offer))
        if verdict.ok and not isinstance(verdict.value, bool):
            log.error(
                "%s: decide %s returned %s, not True or False; declining",
                self.group,
                offer.request_id,
                cut(visible(repr(verdict.value)), 200),
            )
            return False
        return verdict.ok and verdict.value

    async def _present(self, offer: Offer) -> None:
        if offer.request_id in self.shown:
            return  # re-read after a reconnect: already showing it
        self.shown.show(offer)
        with _tracing.joined(
            "askq.present", offer.trace, request_id=offer.request_id, group=self.group
        ):
            shown = await self.call_hook("present", offer.request_id, self.answerer.present(offer))
        if not shown.ok:  # a question that cannot be shown is given back
            self.shown.take(offer.request_id)
            await self.seam.answering.release(offer.request_id, self.group)
