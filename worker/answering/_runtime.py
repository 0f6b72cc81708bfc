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
from collections.abc import Callable, Coroutine
from typing import Any

from ..observing._recent import recent_in_shards
from ..observing._status import full_status
from ..observing._trends import fleet_trends
from ..protocol._checks import MAX_CONSUMER, check_group, check_text, duration_ms, parse_scope
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import Offer
from ..redis._blocking import BlockingLoop, raise_if_cancelled
from ..redis._connections import CONNECTION_ERRORS
from ..redis._full import is_full
from ..redis._heartbeat import keep_beating
from ..redis._marker import still_same_layout
from ..redis._outage import outage, unreachable
from ..seam._registry import GroupSpec
from ..seam._seam import Seam
from ._answerer import Answerer, GroupHandle
from ._hooks import HookResult, call_hook
from ._offers import Offers, Side
from ._outcomes import CountedAnswering, Outcomes
from ._sends import SendQueue
from ._shown import Shown, ShownInShards
from ._store import ChannelStore

log = logging.getLogger("askq.runtime")

FLEET_LISTED = 100  # pending requests a dashboard (GroupHandle.fleet) lists by age


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
        self.outcomes = Outcomes(group, self.priority, seam.requests)
        self.sends = SendQueue(settings, seam.keys.queue(f"sends:{group}"), answerer)
        block_ms = int(settings.block_seconds * 1000)
        # What the replica runs in each shard: its tier stream and the events it follows.
        self.sides = [
            Side(
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
                    on_retract=self.outcomes.retracted,
                    on_remind=self.outcomes.reminded,
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
            answering=CountedAnswering(seam.answering, seam.requests, self.outcomes),
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
        self._tasks: set[asyncio.Task[Any]] = set()
        self.offers = Offers(
            seam,
            answerer,
            group,
            self.priority,
            self.scope,
            self.consumer,
            self.shown,
            self.outcomes,
            call_hook=self._call_hook,
            register_again=functools.partial(self._register, "beat"),
            tasks=self._tasks,
            block_ms=block_ms,
        )
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
                    functools.partial(self.offers.read, side),
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
                        await self.offers.spawn(side, entry_id, fields, recovered=True)
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
