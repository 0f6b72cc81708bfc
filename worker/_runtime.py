"""The loop that runs one replica of one answerer group.

A group is a consumer group on its tier's stream; each replica is a consumer. The
replica:

1. registers (lua/register: the consumer group first, so no offer made to it is missed;
   the group's priority and scope; live), then heartbeats, every beat registering again
   whatever Redis lost;
2. reads offers with XREADGROUP BLOCK (never polls), and for each decides by scope and
   by the answerer, accepts or declines, and presents what it claimed;
3. reads the events stream and retracts what settled elsewhere (`_shown.py`);
4. once a period, takes over the entries of replicas of its group whose heartbeat has
   lapsed, and on start re-reads its own pending entries, so a replica killed at any
   point loses nothing.

Every answerer hook runs bounded (`_hooks.py`): a channel that fails, hangs or answers
with something that is not an answer passes the question on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from . import _recorder, _tracing
from ._answerer import FINAL_REFUSALS, Answerer, GroupHandle
from ._answering import Answering
from ._blocking import BlockingLoop, raise_if_cancelled
from ._checks import MAX_CONSUMER, check_group, check_text, duration_ms, parse_scope
from ._connections import CONNECTION_ERRORS
from ._errors import AskError, ErrorCode
from ._full import is_full
from ._heartbeat import keep_beating
from ._hooks import HookResult, call_hook
from ._marker import still_same_layout
from ._models import Answers, AskRequest, Offer, Retraction, scope_matches
from ._outage import outage, unreachable
from ._recent import recent_in_shards
from ._registry import GroupSpec
from ._replies import Reply
from ._requests import RequestInfo
from ._seam import Seam
from ._sends import SendQueue
from ._sharded import Shard
from ._shown import Shown, ShownInShards
from ._status import full_status
from ._store import ChannelStore
from ._text import cut, visible
from ._trends import fleet_trends

log = logging.getLogger("askq.runtime")

READ_COUNT = 64
MAX_IN_FLIGHT = 256
FLEET_LISTED = 100  # pending requests a dashboard (GroupHandle.fleet) lists by age
REREAD_AFTER = 2.0  # seconds: an offer refused because Redis was full is handled again


def stop_on_signals() -> asyncio.Event:
    """An event set on SIGINT/SIGTERM, so a process ends cleanly (claims kept, asks
    withdrawn) instead of dying mid-step."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def run_until_stopped(task: asyncio.Task[Any], stop: asyncio.Event | None = None) -> None:
    """Wait until `stop` is set (default: SIGINT or SIGTERM) or the task ends, then
    cancel the task and wait for it to finish its cleanup."""
    stop = stop or stop_on_signals()
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _ms(seconds: float | None, name: str) -> int:
    """A group's deadline in ms (None or 0: none), rounded up, never 0 for > 0."""
    if seconds is None:
        return 0
    return duration_ms(seconds, name, code=ErrorCode.CONFIG_ERROR)


def _is_answer_at_once(value: Any) -> bool:
    """What `Answerer.answer_at_once` promises besides None: (answers, who gave them)."""
    if not (isinstance(value, tuple) and len(value) == 2):
        return False
    return isinstance(value[1], str) and bool(value[1])


class _CountedAnswering(Answering):
    """The group's answers and releases (from any replica, through its GroupHandle)
    counted, logged and traced as the group's outcomes."""

    def __init__(self, answering: Answering, runtime: AnswererRuntime) -> None:
        super().__init__(answering.scripts, answering.requests)
        self._inner = answering  # with several shards, one that routes by request id
        self._runtime = runtime

    async def accept(self, offer: Offer) -> bool:
        return await self._inner.accept(offer)

    async def decline(self, request_id: str, group: str, tier: int, offer_id: str) -> Reply:
        return await self._inner.decline(request_id, group, tier, offer_id)

    async def claim_and_answer(self, offer: Offer, answers: Any, *, by: str) -> Answers:
        return await self._inner.claim_and_answer(offer, answers, by=by)

    async def answer(
        self, request_id: str, group: str, answers: Any, *, by: str, tier: int | None = None
    ) -> Answers:
        trace = None
        if _tracing.ENABLED:
            with contextlib.suppress(AskError):  # cached for offers read here
                trace = (await self._runtime.seam.requests.request(request_id)).trace
        with _tracing.joined("askq.answer", trace, request_id=request_id, group=group, by=by):
            valid = await self._inner.answer(request_id, group, answers, by=by, tier=tier)
        await self._runtime.settled_here(request_id, "answered", by)
        return valid

    async def release(self, request_id: str, group: str) -> bool:
        released = await self._inner.release(request_id, group)
        if released:
            await self._runtime.settled_here(request_id, "released", "")
        return released


@dataclass(eq=False)
class _Side:
    """A replica's part in one shard: the shard, what it shows from there, its tier
    stream, and where its re-read of its own pending entries stands."""

    shard: Shard
    shown: Shown
    stream: str
    own_cursor: str | None = "0"
    reread_due: bool = False  # a re-read of its own entries is scheduled

    async def reread_own(self, conn: Redis) -> None:
        self.own_cursor = "0"


class AnswererRuntime:
    def __init__(
        self,
        seam: Seam,
        answerer: Answerer[Any],
        *,
        group: str,
        priority: int = 0,
        scope: dict[str, str] | None = None,
        consumer: str | None = None,
        decision_window: float | None = None,
        escalate_after: float | None = None,
        remind_after: float | None = None,
    ) -> None:
        """`decision_window`: seconds the group has to decide an offer (default: the
        setting); `escalate_after`: seconds a claim may go unanswered before the request
        moves on to the next tier; `remind_after`: seconds until the channel is asked
        to remind its humans (`Answerer.remind`). None: no escalation, no reminder."""
        group = check_group(group, "group", ErrorCode.CONFIG_ERROR)
        if consumer is not None:
            check_text(consumer, "consumer", MAX_CONSUMER, code=ErrorCode.CONFIG_ERROR)
        settings = seam.settings
        self.seam = seam
        self.answerer = answerer
        self.group = group
        self.priority = int(priority)
        if not -(2**31) <= self.priority < 2**31:
            raise AskError(ErrorCode.CONFIG_ERROR, f"priority {self.priority}: out of range")
        self.scope = parse_scope(scope, "scope", ErrorCode.CONFIG_ERROR)
        window = settings.decision_window if decision_window is None else decision_window
        self.timing = {
            "decision_window_ms": _ms(window, "decision_window"),
            "escalate_ms": _ms(escalate_after, "escalate_after"),
            "remind_ms": _ms(remind_after, "remind_after"),
            # How long it may be live past a heartbeat that is overdue (routing offers
            # to it rather than fail NO_ANSWERER: lua/common.lua, route).
            "ttl_ms": _ms(settings.consumer_ttl, "consumer_ttl"),
        }
        self.spec = GroupSpec(group, self.priority, answerer.kind, self.scope, self.timing)
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{id(self):x}"
        self.hook_timeout = settings.hook_timeout
        self.ready = asyncio.Event()
        self.sends = SendQueue(settings, seam.keys.queue(f"sends:{group}"), answerer)
        block_ms = int(settings.block_seconds * 1000)
        # What the replica runs in each shard: its tier stream and the events it follows.
        self.sides = [
            _Side(
                shard,
                Shown(
                    group,
                    self.priority,
                    shard.keys,
                    shard.requests,
                    answerer.retract,
                    answerer.remind,
                    self._in_background,
                    block_ms,
                    on_retract=self._retracted,
                    on_remind=self._reminded,
                ),
                shard.keys.tier(self.priority),
            )
            for shard in seam.shards
        ]
        self.stream = self.sides[0].stream
        self.shown: Shown | ShownInShards = (
            self.sides[0].shown
            if len(self.sides) == 1
            else ShownInShards([side.shown for side in self.sides], seam.layout)
        )
        self._handle = GroupHandle(
            group,
            answering=_CountedAnswering(seam.answering, self),
            requests=seam.requests,
            # The group's own records: never another group's, of the same kind or not.
            store=ChannelStore(
                seam.single_node, seam.keys.base, f"{answerer.kind}:{group}", settings
            ),
            priority=self.priority,
            take=self.shown.take,
            restore=self.shown.show,
            sender=self.sends.enqueue if answerer.uses_sends else None,
            live=self.ready.is_set,
            fleet=lambda: full_status(seam, FLEET_LISTED),
            recent=lambda n: recent_in_shards(seam, n),
            trends=lambda: fleet_trends(seam),
        )
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._block_ms = block_ms
        self._period = settings.consumer_ttl / 3
        self._stop = asyncio.Event()  # set when the registry refuses this replica
        self._stopped_by: AskError | None = None

    @property
    def presented(self) -> dict[str, Offer]:
        """What this replica shows now, by request id."""
        return self.shown.offers

    # --- lifecycle -------------------------------------------------------------------

    async def start(self, timeout: float | None = None) -> asyncio.Task[None]:
        """Run in a task; return it once the group is live. If the runtime stops before
        (bad settings, Redis down), raise what stopped it instead of waiting forever."""
        task = asyncio.create_task(self.run(), name=f"askq-{self.group}")
        ready = asyncio.create_task(self.ready.wait())
        try:
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED, timeout=timeout)
        finally:
            ready.cancel()
        if task.done():
            task.result()  # raises what stopped it
        if not self.ready.is_set():
            task.cancel()
            raise AskError(ErrorCode.INTERNAL, f"group {self.group} did not start in {timeout} s")
        return task

    async def serve(
        self,
        stop: asyncio.Event | None = None,
        *,
        on_ready: Callable[[], None] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Run until `stop` is set (default: until SIGINT or SIGTERM) or the runtime
        fails, then leave cleanly. `on_ready` is called once the group is live."""
        task = await self.start(timeout)
        if on_ready is not None:
            on_ready()
        await run_until_stopped(task, stop)

    async def run(self) -> None:
        """Register, then serve until cancelled (or until the registry refuses this
        replica: then raise its CONFIG_ERROR)."""
        # The channel starts first: a group must not turn live before it can show anything.
        await self.answerer.start(self._handle)
        blocking = []
        for side in self.sides:
            # One blocking connection per loop, to the master of its shard's slot.
            connect = functools.partial(self.seam.blocking_connection, side.shard.index)
            name = f"askq-{self.group}" + (f"-{side.shard.index}" if len(self.sides) > 1 else "")
            blocking += [
                BlockingLoop(
                    f"{name}-offers",
                    connect,
                    functools.partial(self._read_offers, side),
                    side.reread_own,
                ),
                BlockingLoop(f"{name}-events", connect, side.shown.read, side.shown.resync),
            ]
        loops: list[asyncio.Task[Any]] = []
        try:
            await self._read_records_of_old_versions()  # before any offer is shown
            await self._register()
            self.ready.set()
            loops = [
                asyncio.create_task(self._heartbeat_loop(), name=f"askq-{self.group}-beat"),
                asyncio.create_task(self._maintenance_loop(), name=f"askq-{self.group}-upkeep"),
                asyncio.create_task(self._stop.wait(), name=f"askq-{self.group}-stop"),
                *(loop.start() for loop in blocking),
            ]
            if self.answerer.uses_sends:
                loops.append(asyncio.create_task(self.sends.run(), name=f"askq-{self.group}-sends"))
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
            if self._stopped_by is not None:
                raise self._stopped_by
            for task in done:
                task.result()  # raises what ended it
        finally:
            for task in loops:
                task.cancel()
            for loop in blocking:
                await loop.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*loops, *self._tasks, return_exceptions=True)
            # Each step runs whatever the one before raised: a send cut short at shutdown
            # must not keep the channel from stopping (ports, sockets) or the replica
            # from leaving.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self.sends.aclose()
            await self._call_hook("stop", "", self.answerer.stop())
            if self.ready.is_set():
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.seam.registry.leave(self.group, self.consumer))

    async def _register(self, mode: str = "start") -> None:
        """Register (start) or re-register (each heartbeat) this replica; a replica that
        disagrees with its group's priority or scope is refused (CONFIG_ERROR)."""
        if mode == "start":
            # A replica counting other shards than the deployment would never meet its
            # callers: refused (CONFIG_ERROR naming both numbers, _marker.py).
            await self.seam.check_shards()
        again = False
        for side in self.sides:  # the registry a request needs is in its own shard
            if mode == "start":
                # Read the events stream from here on: what settles after this is ours.
                last = await self.seam.redis.xrevrange(side.shard.keys.events, count=1)
                side.shown.start_from(last[0][0] if last else "0-0")
            again = await side.shard.registry.register(self.spec, self.consumer, mode=mode) or again
        if again:
            log.warning(
                "%s: its registration was gone (Redis lost its data?); registered again",
                self.group,
            )

    async def _heartbeat_loop(self) -> None:
        """Beat every third of the consumer TTL; a beat that fails is retried at once. A
        registry that now disagrees with this replica (the group was removed and
        registered anew) stops it."""
        await asyncio.sleep(self._period)  # registering was the first beat
        await keep_beating(f"replica {self.consumer} of {self.group}", self._beat, self._period)

    async def _beat(self) -> None:
        try:
            await self._register("beat")
            # The deployment was re-sharded meanwhile:
            seam = self.seam
            await still_same_layout(seam.redis, seam.layout, seam.settings)
        except AskError as exc:
            if exc.code is not ErrorCode.CONFIG_ERROR:
                raise
            self._stopped_by = exc
            self._stop.set()

    async def _maintenance_loop(self) -> None:
        """Take over the entries of dead replicas and trim the stream, once a period."""
        while True:
            raise_if_cancelled()
            await asyncio.sleep(self._period)
            try:
                for side in self.sides:
                    registry = side.shard.registry
                    for entry_id, fields in await registry.take_over_dead(self.spec, self.consumer):
                        await self._spawn(side, entry_id, fields, recovered=True)
                    await registry.trim(self.priority)
            except (AskError, *CONNECTION_ERRORS) as exc:
                if is_full(exc):
                    pass  # (said once an episode: _full.py)
                elif unreachable(exc):
                    outage.failed(f"maintenance of {self.group}", exc)  # once per outage
                else:
                    log.warning("maintenance of %s failed: %s", self.group, exc)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("maintenance of %s failed", self.group)

    # --- offers ----------------------------------------------------------------------

    async def _read_records_of_old_versions(self) -> None:
        """Versions before per-group stores kept a channel's records per kind
        (`{p}:<kind>:`). A group that is the only one of its kind may read them as its
        own (what it sent or posted before the upgrade is not sent again); with other
        groups of its kind they are nobody's in particular, and reading them would
        mistake another group's record for this one's, so they are left to expire."""
        kind = self.answerer.kind
        kinds = await self.sides[0].shard.registry.kinds()
        others = sorted(name for name, k in kinds.items() if k == kind and name != self.group)
        if others:
            log.info(
                "%s: not reading %s records of older versions (kept per kind, shared with %s)",
                self.group,
                kind,
                ", ".join(others),
            )
            return
        self._handle.store.read_also(kind)

    async def _read_offers(self, side: _Side, conn: Redis) -> None:
        # First what this consumer held before a restart (its own pending entries, from
        # id 0 on), then block for new offers.
        cursor = side.own_cursor  # (a re-read asked for meanwhile is the next read's)
        try:
            reply = await conn.xreadgroup(
                self.group,
                self.consumer,
                {side.stream: cursor or ">"},
                count=READ_COUNT,
                block=None if cursor else self._block_ms,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The consumer group is gone (Redis lost its data): register again now, not
            # at the next heartbeat, and read from there.
            await self._register("beat")
            return
        entries = reply[0][1] if reply else []
        if cursor is not None:
            side.own_cursor = entries[-1][0] if entries else None
        for entry_id, fields in entries:
            if not fields:  # trimmed away; nothing to recover
                await self.seam.redis.xack(side.stream, self.group, entry_id)
                continue
            await self._spawn(side, entry_id, fields, recovered=cursor is not None)

    async def _spawn(
        self, side: _Side, entry_id: str, fields: dict[str, str], *, recovered: bool
    ) -> None:
        await self._in_flight.acquire()
        task = asyncio.create_task(self._handle_entry(side, entry_id, fields, recovered))
        self._tasks.add(task)

        def finished(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self._in_flight.release()

        task.add_done_callback(finished)

    async def _handle_entry(
        self, side: _Side, entry_id: str, fields: dict[str, str], recovered: bool
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

    def _reread_later(self, side: _Side) -> None:
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
            self._decided(offer, "declined", started)
            return
        at_once = await self._call_hook(
            "answer_at_once", offer.request_id, self.answerer.answer_at_once(offer)
        )
        if not at_once.ok:
            await answering.decline(*decline)
            self._decided(offer, "declined", started)
        elif at_once.value is not None:
            if not _is_answer_at_once(at_once.value):
                log.error(
                    "%s: answer_at_once %s returned %s, not None or (answers, by: str); declining",
                    self.group,
                    offer.request_id,
                    cut(visible(repr(at_once.value)), 200),
                )
                await answering.decline(*decline)
                self._decided(offer, "declined", started)
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
                    self._decided(offer, "declined", started)
                elif exc.code not in FINAL_REFUSALS:
                    raise
            else:
                self._decided(offer, "answered", started)
                self._settled(offer.request_id, "answered", by, offer.created_ms)
        elif await answering.accept(offer):
            self._decided(offer, "accepted", started)
            await self._present(offer)

    async def _handle_recovered(self, side: _Side, entry_id: str, request_id: str) -> None:
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
        verdict = await self._call_hook("decide", offer.request_id, self.answerer.decide(offer))
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
            shown = await self._call_hook("present", offer.request_id, self.answerer.present(offer))
        if not shown.ok:  # a question that cannot be shown is given back
            self.shown.take(offer.request_id)
            await self.seam.answering.release(offer.request_id, self.group)

    # --- what it did: metrics and log lines --------------------------------------------

    def _decided(self, offer: Offer, decision: str, started: float) -> None:
        seconds = time.monotonic() - started
        _recorder.recorder.decided(self.group, decision, seconds)
        if decision == "declined":
            _recorder.recorder.passed_on(self.group, self.priority, "declined")
        if not log.isEnabledFor(logging.INFO):
            return
        log.info(
            "%s %s %s (tier %d, %.1f ms)",
            self.group,
            decision,
            offer.request_id,
            self.priority,
            seconds * 1000,
            extra={
                "askq": {
                    "event": "decision",
                    "group": self.group,
                    "request": offer.request_id,
                    "tier": self.priority,
                    "decision": decision,
                    "ms": round(seconds * 1000, 3),
                }
            },
        )

    def _settled(self, request_id: str, outcome: str, by: str, created_ms: int | None) -> None:
        """A request this group held ended for it: answered here, or retracted."""
        seconds = _recorder.seconds_since(created_ms)
        _recorder.recorder.settled(self.group, outcome, seconds)
        if outcome in ("released", "escalated"):
            _recorder.recorder.passed_on(self.group, self.priority, outcome)
        if not log.isEnabledFor(logging.INFO):
            return
        log.info(
            "%s: %s %s%s after %.1f s",
            self.group,
            request_id,
            outcome,
            f" by {visible(by)}" if by else "",
            seconds,
            extra={
                "askq": {
                    "event": "settlement",
                    "group": self.group,
                    "request": request_id,
                    "outcome": outcome,
                    "by": by,
                    "seconds": round(seconds, 3),
                }
            },
        )

    async def settled_here(self, request_id: str, outcome: str, by: str) -> None:
        """An answer or release through the GroupHandle landed."""
        created: int | None = None
        if _recorder.recorder.enabled or log.isEnabledFor(logging.INFO):
            with contextlib.suppress(AskError):  # cached for offers read here
                created = (await self.seam.requests.request(request_id)).created_ms
        self._settled(request_id, outcome, by, created)

    def _retracted(self, offer: Offer, retraction: Retraction) -> None:
        self._settled(
            offer.request_id,
            _recorder.outcome_of(retraction.state.value, retraction.code),
            retraction.by or "",
            offer.created_ms,
        )

    def _reminded(self, offer: Offer) -> None:
        _recorder.recorder.reminded(self.group)
        log.info(
            "%s: reminding %s",
            self.group,
            offer.request_id,
            extra={"askq": {"event": "remind", "group": self.group, "request": offer.request_id}},
        )

    # --- hooks -----------------------------------------------------------------------

    async def _call_hook(
        self, hook: str, request_id: str, call: Coroutine[Any, Any, Any]
    ) -> HookResult:
        return await call_hook(f"group {self.group}", hook, request_id, call, self.hook_timeout)

    def _in_background(self, hook: str, request_id: str, call: Coroutine[Any, Any, Any]) -> None:
        """Run a retract or remind hook in a task of its own (bounded like every hook),
        so one that is slow or stuck does not hold up the events of other requests."""
        task = asyncio.create_task(self._call_hook(hook, request_id, call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
