"""The loop that runs one replica of one answerer group.

A group is a consumer group on its tier's stream; each replica is a consumer. The
replica:

1. registers: creates the consumer group (before it is live, so no offer made to it is
   missed), records the group's priority and scope, then heartbeats (live);
2. reads offers with XREADGROUP BLOCK (never polls), and for each decides by scope and
   by the answerer, accepts or declines (atomic scripts), and presents what it claimed;
3. reads the events stream (XREAD BLOCK) and retracts what settled elsewhere;
4. on each heartbeat, takes over the pending entries of replicas of its group whose
   heartbeat has lapsed (XCLAIM), and on start re-reads its own pending entries, so a
   replica killed at any point loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ._answerer import FINAL_REFUSALS, Answerer, GroupHandle
from ._blocking import BlockingLoop, raise_if_cancelled
from ._connections import CONNECTION_ERRORS
from ._errors import AskError, ErrorCode
from ._heartbeat import keep_beating
from ._hooks import HookResult, call_hook
from ._keys import split_groups
from ._models import TERMINAL, AskRequest, Offer, Retraction, duration_ms, scope_matches
from ._seam import RequestInfo, Seam
from ._sends import SendQueue
from ._text import cut, visible

log = logging.getLogger("askq.runtime")

GROUP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
READ_COUNT = 64
MAX_IN_FLIGHT = 256
RECOVER_BATCH = 100


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
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[1], str)
        and bool(value[1])
    )


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


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
        if not GROUP_NAME.fullmatch(group):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"group name {group!r}: use 1-64 letters, digits, '_', '.' or '-'",
            )
        self.seam = seam
        self.answerer = answerer
        self.group = group
        self.priority = int(priority)
        self.scope = dict(scope or {})
        window = seam.settings.decision_window if decision_window is None else decision_window
        self.timing = {
            "decision_window_ms": _ms(window, "decision_window"),
            "escalate_ms": _ms(escalate_after, "escalate_after"),
            "remind_ms": _ms(remind_after, "remind_after"),
        }
        if not -(2**31) <= self.priority < 2**31:
            raise AskError(ErrorCode.CONFIG_ERROR, f"priority {self.priority}: out of range")
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{id(self):x}"
        self.stream = seam.keys.tier(self.priority)
        self.presented: dict[str, Offer] = {}
        self.ready = asyncio.Event()
        self.sends = SendQueue(seam.settings, seam.keys.queue(f"sends:{group}"), answerer)
        self._handle = GroupHandle(
            seam,
            group,
            take=lambda request_id: self.presented.pop(request_id, None),
            restore=self._show,
            sender=self.sends.enqueue if answerer.uses_sends else None,
        )
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._events_from = "$"
        self._showing = asyncio.Event()  # set while this replica shows something
        self._own_cursor: str | None = "0"
        self._block_ms = int(seam.settings.block_seconds * 1000)
        self._period = seam.settings.consumer_ttl / 3
        self.hook_timeout = seam.settings.hook_timeout
        self._stop = asyncio.Event()  # set when the registry refuses this replica
        self._stopped_by: AskError | None = None
        # What the registry holds of the group; `identity` is what every replica of it
        # must agree on besides the priority (its scope), checked by lua/register.
        self._identity = json.dumps({"scope": self.scope}, sort_keys=True, separators=(",", ":"))
        self._info = json.dumps(
            {
                "kind": answerer.kind,
                "scope": self.scope,
                "priority": self.priority,
                "identity": self._identity,
                **self.timing,
            },
            sort_keys=True,
        )

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
        connect = self.seam.blocking_connection
        blocking = [
            BlockingLoop(f"askq-{self.group}-offers", connect, self._read_offers, self._reread_own),
            BlockingLoop(
                f"askq-{self.group}-events", connect, self._read_events, self._resync_presented
            ),
        ]
        loops: list[asyncio.Task[Any]] = []
        try:
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
                    await asyncio.shield(self._leave())

    async def _register(self, mode: str = "start") -> None:
        """Register (start) or re-register (each heartbeat) this replica: lua/register.
        A group has one priority, kind and scope; a replica that disagrees is refused."""
        k = self.seam.keys
        with self.seam.redis_errors():
            if mode == "start":
                # Read the events stream from here on: what settles after this is ours.
                last = await self.seam.redis.xrevrange(k.events, count=1)
                self._events_from = last[0][0] if last else "0-0"
            result = await self.seam.call(
                "register",
                [k.groups, k.group_info, k.live, k.consumers(self.group), self.stream],
                [
                    self.group,
                    str(self.priority),
                    self._info,
                    self._identity,
                    self.consumer,
                    duration_ms(self.seam.settings.consumer_ttl, "consumer_ttl"),
                    mode,
                ],
            )
        if result[0] == "CONFLICT":
            raise self._conflict(result[1], result[2])
        if mode == "start" or result[1] == "1":
            if mode != "start":
                log.warning(
                    "%s: its registration was gone (Redis lost its data?); registered again",
                    self.group,
                )
            await self.seam.tier_streams(refresh=True)

    def _conflict(self, priority: str, info: str) -> AskError:
        try:
            known = json.loads(info) if info else {}
        except ValueError:
            known = {}
        scope = known.get("scope") or {}
        shown = ",".join(f"{key}={value}" for key, value in sorted(scope.items())) or "*"
        mine = ",".join(f"{key}={value}" for key, value in sorted(self.scope.items())) or "*"
        return AskError(
            ErrorCode.CONFIG_ERROR,
            f"group {self.group} is registered with priority {priority}, scope"
            f" {visible(shown)}; this replica has priority {self.priority}, scope"
            f" {visible(mine)}. A group has one priority and one scope: start it with"
            f" those, use another --group, or stop the group's replicas and"
            f" `askq group remove {self.group}` to register it anew",
        )

    async def _leave(self) -> None:
        """Stop being live; the group stays live while another replica beats."""
        k = self.seam.keys
        await self.seam.call(
            "leave", [k.consumers(self.group), k.live], [self.group, self.consumer]
        )

    async def _heartbeat_loop(self) -> None:
        """Beat (re-registering whatever Redis lost) every third of the consumer TTL;
        a beat that fails is retried at once (_heartbeat.keep_beating). A registry that
        now disagrees with this replica (the group was removed and registered anew)
        stops it."""
        await asyncio.sleep(self._period)  # registering was the first beat
        await keep_beating(f"replica {self.consumer} of {self.group}", self._beat, self._period)

    async def _beat(self) -> None:
        try:
            await self._register("beat")
        except AskError as exc:
            if exc.code is ErrorCode.CONFIG_ERROR:
                self._stopped_by = exc
                self._stop.set()
                return
            raise

    async def _maintenance_loop(self) -> None:
        """Take over the entries of dead replicas and trim the stream, once a period."""
        while True:
            raise_if_cancelled()
            await asyncio.sleep(self._period)
            try:
                await self._recover_dead_replicas()
                await self._trim_stream()
            except CONNECTION_ERRORS as exc:
                log.warning("maintenance of %s failed: %s", self.group, exc)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("maintenance of %s failed", self.group)

    # --- offers ----------------------------------------------------------------------

    async def _read_offers(self, conn: Redis) -> None:
        # First what this consumer held before a restart (its own pending entries, from
        # id 0 on), then block for new offers.
        try:
            reply = await conn.xreadgroup(
                self.group,
                self.consumer,
                {self.stream: self._own_cursor or ">"},
                count=READ_COUNT,
                block=None if self._own_cursor else self._block_ms,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The consumer group is gone (Redis lost its data): register again now, not
            # at the next heartbeat, and read from there.
            await self._register("beat")
            return
        entries = reply[0][1] if reply else []
        if self._own_cursor is not None:
            self._own_cursor = entries[-1][0] if entries else None
        for entry_id, fields in entries:
            if not fields:  # trimmed away; nothing to recover
                await self.seam.redis.xack(self.stream, self.group, entry_id)
                continue
            await self._spawn(entry_id, fields, recovered=self._own_cursor is not None)

    async def _reread_own(self, conn: Redis) -> None:
        self._own_cursor = "0"

    async def _spawn(self, entry_id: str, fields: dict[str, str], *, recovered: bool) -> None:
        await self._in_flight.acquire()
        task = asyncio.create_task(self._handle_entry(entry_id, fields, recovered))
        self._tasks.add(task)

        def finished(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self._in_flight.release()

        task.add_done_callback(finished)

    async def _handle_entry(self, entry_id: str, fields: dict[str, str], recovered: bool) -> None:
        request_id = fields.get("request", "")
        try:
            if recovered or "payload" not in fields:
                await self._handle_recovered(entry_id, request_id)
            else:
                request = AskRequest.model_validate_json(fields["payload"])
                self.seam.remember(RequestInfo(request=request, inbox=fields["inbox"]))
                await self._handle_offer(self._offer(entry_id, request))
        except CONNECTION_ERRORS as exc:
            # Left pending: this replica (on restart) or another one recovers it.
            log.warning("offer %s of %s not handled: %s", request_id, self.group, exc)
        except Exception:  # noqa: BLE001 - one bad offer must not stop the worker
            log.exception("offer %s of %s failed; passing it on", request_id, self.group)
            await self._pass_on(request_id, entry_id)

    async def _pass_on(self, request_id: str, entry_id: str) -> None:
        """Handling an entry failed half-way (a bug, a refused answer): whatever the
        group holds of it, decline it or give the claim back, so it is not left
        undecided or claimed with nobody showing it."""
        try:
            reply = await self.seam.decline_entry(request_id, self.group, self.priority, entry_id)
            if reply and reply[0] == "CLAIMED":
                self.presented.pop(request_id, None)
                await self.seam.release(request_id, self.group)
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
        )

    async def _handle_offer(self, offer: Offer) -> None:
        """A fresh offer: decide, then claim or decline. The scripts check that it is
        still this group's to decide (and acknowledge it when it is not). An answerer
        that fails, hangs or answers with something that is not an answer declines."""
        if not await self._decide(offer):
            await self.seam.decline(offer)
            return
        at_once = await self._call_hook(
            "answer_at_once", offer.request_id, self.answerer.answer_at_once(offer)
        )
        if not at_once.ok:
            await self.seam.decline(offer)
        elif at_once.value is not None:
            if not _is_answer_at_once(at_once.value):
                log.error(
                    "%s: answer_at_once %s returned %s, not None or (answers, by: str); declining",
                    self.group,
                    offer.request_id,
                    cut(visible(repr(at_once.value)), 200),
                )
                await self.seam.decline(offer)
                return
            answers, by = at_once.value
            try:
                await self.seam.claim_and_answer(offer, answers, by=by)
            except AskError as exc:
                if exc.code is ErrorCode.INVALID_REQUEST:
                    log.warning("%s answer to %s refused: %s", self.group, offer.request_id, exc)
                    await self.seam.decline(offer)
                elif exc.code not in FINAL_REFUSALS:
                    raise
        elif await self.seam.accept(offer):
            await self._present(offer)

    async def _call_hook(
        self, hook: str, request_id: str, call: Coroutine[Any, Any, Any]
    ) -> HookResult:
        return await call_hook(f"group {self.group}", hook, request_id, call, self.hook_timeout)

    async def _handle_recovered(self, entry_id: str, request_id: str) -> None:
        """An entry that was pending on this or a dead replica: it may be a claim of the
        group (present it again, without deciding) or an offer not yet decided."""
        redis = self.seam.redis
        row = await redis.hmget(  # type: ignore[misc]
            self.seam.keys.request(request_id), ["state", "tier", "offer", "undecided", "claimers"]
        )
        state, tier, offer_id, undecided, claimers = row
        if (
            state is None
            or state in TERMINAL
            or offer_id != entry_id
            or tier is None
            or int(tier) != self.priority
            or self.group not in split_groups(undecided) + split_groups(claimers)
        ):
            await redis.xack(self.stream, self.group, entry_id)  # no longer ours
            return
        try:
            info = await self.seam.request_info(request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            await redis.xack(self.stream, self.group, entry_id)  # expired meanwhile
            return
        offer = self._offer(entry_id, info.request)
        if self.group in split_groups(claimers):
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
        if offer.request_id in self.presented:
            return  # re-read after a reconnect: already showing it
        self._show(offer)
        shown = await self._call_hook("present", offer.request_id, self.answerer.present(offer))
        if not shown.ok:  # a question that cannot be shown is given back
            self.presented.pop(offer.request_id, None)
            await self.seam.release(offer.request_id, self.group)

    # --- recovery --------------------------------------------------------------------

    async def _recover_dead_replicas(self) -> None:
        """Take over entries pending on replicas of this group that stopped beating,
        and forget those replicas (restarts under new names must not pile up)."""
        k = self.seam.keys
        redis = self.seam.redis
        now = await self.seam.now_ms()
        live = set(await redis.zrangebyscore(k.consumers(self.group), now, "+inf"))
        try:
            consumers = await redis.xinfo_consumers(self.stream, self.group)
        except ResponseError:  # the group's stream is gone; it is recreated on restart
            return
        for consumer in consumers:
            name = consumer["name"]
            if name == self.consumer or name in live:
                continue
            if consumer["pending"]:
                await self._take_over(name)
            await redis.xgroup_delconsumer(self.stream, self.group, name)
        await redis.zremrangebyscore(k.consumers(self.group), "-inf", now)

    async def _take_over(self, dead: str) -> None:
        redis = self.seam.redis
        while True:
            entries = await redis.xpending_range(
                self.stream, self.group, "-", "+", RECOVER_BATCH, consumername=dead
            )
            if not entries:
                return
            ids = [e["message_id"] for e in entries]
            claimed = await redis.xclaim(self.stream, self.group, self.consumer, 0, ids)
            log.info("%s took over %d offers of %s", self.consumer, len(claimed), dead)
            for entry_id, fields in claimed:
                if fields is None:  # trimmed away; nothing to recover
                    await redis.xack(self.stream, self.group, entry_id)
                    continue
                await self._spawn(entry_id, fields, recovered=True)
            if len(entries) < RECOVER_BATCH:
                return

    async def _trim_stream(self) -> None:
        await trim_tier(self.seam, self.stream)

    # --- retraction ------------------------------------------------------------------

    def _show(self, offer: Offer) -> None:
        self.presented[offer.request_id] = offer
        self._showing.set()

    async def _read_events(self, conn: Redis) -> None:
        if not self.presented:
            # Nothing shown here, so nothing to retract or remind: wait for something to
            # be shown instead of waking for every settlement (an answerer that answers
            # at once, like auto, would otherwise wake once per ask for nothing).
            self._showing.clear()
            await self._showing.wait()
            # Catch up without a gap: from the newest event now, after checking what is
            # shown against its request's state (what settled before is caught there).
            last = await conn.xrevrange(self.seam.keys.events, count=1)
            await self._resync_presented(conn)
            self._events_from = last[0][0] if last else "0-0"
        reply = await conn.xread(
            {self.seam.keys.events: self._events_from}, count=256, block=self._block_ms
        )
        for _, entries in reply or []:
            for event_id, fields in entries:
                self._events_from = event_id
                await self._on_event(fields)

    async def _on_event(self, fields: dict[str, Any]) -> None:
        request_id = fields.get("request", "")
        offer = self.presented.get(request_id)
        if offer is None:
            return
        state = fields.get("state", "")
        if fields.get("group", self.group) != self.group:
            return  # another group's reminder or escalation
        if state == "REMIND":
            self._in_background("remind", request_id, self.answerer.remind(offer))
            return
        if state == "OFFERED" and fields.get("tier") == str(self.priority):
            return
        self._retract(
            Retraction(
                request_id=request_id,
                state=state,
                code=fields.get("code") or None,
                by=fields.get("by") or None,
            )
        )

    def _retract(self, retraction: Retraction) -> None:
        self.presented.pop(retraction.request_id, None)
        self._in_background("retract", retraction.request_id, self.answerer.retract(retraction))

    def _in_background(self, hook: str, request_id: str, call: Coroutine[Any, Any, Any]) -> None:
        """Run a retract or remind hook in a task of its own (bounded like every hook),
        so one that is slow or stuck does not hold up the events of other requests."""
        task = asyncio.create_task(self._call_hook(hook, request_id, call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resync_presented(self, conn: Redis) -> None:
        """After a gap in the events stream, check what we show is still ours."""
        for request_id in list(self.presented):
            state, by, code, claimers = await conn.hmget(  # type: ignore[misc]
                self.seam.keys.request(request_id), ["state", "by", "code", "claimers"]
            )
            if state is None or state in TERMINAL or self.group not in split_groups(claimers):
                self._retract(
                    Retraction(
                        request_id=request_id,
                        state=state or "FAILED",
                        code=code or None,
                        by=by or None,
                    )
                )


async def trim_tier(seam: Seam, stream: str) -> int:
    """Drop the tier's entries every group is done with, so the stream stays bounded;
    returns how many were dropped.

    Kept: every entry still pending in some group (a claim may be held for hours;
    recovery needs its entry) and every entry a live group has not read yet. A group
    that is gone does not hold the stream back: offers made while it was gone were
    never its to decide.
    """
    redis = seam.redis
    now = await seam.now_ms()
    floor: tuple[int, int] | None = None
    for info in await redis.xinfo_groups(stream):
        name = info["name"]
        candidates = []
        if info["pending"]:
            candidates.append((await redis.xpending(stream, name))["min"])
        live_until = await redis.zscore(seam.keys.live, name)
        if live_until is not None and live_until > now:
            candidates.append(info["last-delivered-id"])
        for entry_id in filter(None, candidates):  # None: acknowledged meanwhile
            floor = min(floor or _stream_id(entry_id), _stream_id(entry_id))
    if floor is None:
        return 0
    return int(await redis.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))
