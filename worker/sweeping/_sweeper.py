"""The sweeper: timers and recovery (`askq sweeper`; several replicas may run).

- Timers (decision windows, escalation deadlines, reminders, ask timeouts) live in
  one zset written by the state scripts themselves, atomically with the transition
  that sets them, so none is lost. Each replica waits for the earliest one on a
  blocking read (BLPOP of the wake list, timed out at the due time or after at most
  `MAX_SLEEP_S`; a script that adds an earlier timer due within that horizon pushes to
  it), then fires what is due. Firing is the guarded
  `fire` script, which removes the timer as it acts: however many replicas race on a
  timer, it fires once. The wait does not poll: lateness is a round trip, not a tick.
- Maintenance (arq cron, one replica per round): cancel the asks of caller processes
  whose heartbeat expired, release claims held by groups with no live replica
  (XAUTOCLAIM past `orphan_claim_after`), trim the tier streams.

`WorkerSettings` is the arq worker (`arq askq.sweeping._sweeper.WorkerSettings` also runs it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from arq.cron import CronJob, cron
from redis.asyncio import Redis

from ..protocol import _recorder
from ..protocol._errors import AskError, ErrorCode
from ..protocol._replies import Reply
from ..protocol._settings import Settings
from ..redis._arq import worker_options
from ..redis._blocking import BlockingLoop
from ..redis._connections import redis_errors, server_ms
from ..redis._keys import Keys
from ..redis._outage import outage
from ..seam._seam import Seam
from ..seam._sharded import Shard
from ._sweeper_beat import SweeperBeat

log = logging.getLogger("askq.sweeper")

FIRE_BATCH = 100
# The longest the timer loop sleeps between looks at the timers zset: a script does not
# wake it for a timer due later than this (lua/common.lua, WAKE_HORIZON_MS, the same
# figure), which spares every offer's decision window four commands.
MAX_SLEEP_S = 10.0
SWEEPER_CONSUMER = "askq-sweeper"


def _fired(timer: str, state: str, late: float) -> None:
    """Count and log a timer this replica fired (`kind|request|offer|group`)."""
    kind, _, rest = timer.partition("|")
    request_id, _, rest = rest.partition("|")
    group = rest.partition("|")[2]
    _recorder.recorder.fired(kind, late)
    log.info(
        "fired %s of %s%s (now %s), %.0f ms late",
        kind,
        request_id,
        f" for group {group}" if group else "",
        state or "?",
        late * 1000,
        extra={
            "askq": {
                "event": "timer",
                "kind": kind,
                "request": request_id,
                "group": group,
                "state": state,
                "late_ms": round(late * 1000, 1),
            }
        },
    )


class Sweeper:
    """Every shard's timers and recovery (`ASKQ_SHARDS`): a timer loop per shard, on a
    blocking connection to its master; each maintenance round goes over every shard."""

    def __init__(self, seam: Seam) -> None:
        self.seam = seam
        self.fired = 0
        many = len(seam.shards) > 1
        self._timers = [
            BlockingLoop(
                f"askq-sweeper-timers-{shard.index}" if many else "askq-sweeper-timers",
                functools.partial(seam.blocking_connection, shard.index),
                functools.partial(self._timer_step, shard),
            )
            for shard in seam.shards
        ]

    # --- timers ----------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        """Start the timer loops; the task returned ends when one of them ends."""
        if len(self._timers) == 1:
            return self._timers[0].start()
        tasks = [loop.start() for loop in self._timers]

        async def first() -> None:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()

        return asyncio.create_task(first(), name="askq-sweeper-timers")

    async def aclose(self) -> None:
        for loop in self._timers:
            await loop.close()

    async def fire_due(self) -> int:
        """Fire every timer due now, in every shard; returns how many this replica fired."""
        return sum([await self.fire_due_in(shard) for shard in self.seam.shards])

    async def fire_due_in(self, shard: Shard) -> int:
        k, redis = shard.keys, self.seam.redis
        fired = 0
        while True:
            now = await server_ms(redis)
            due = await redis.zrangebyscore(
                k.timers, "-inf", now, start=0, num=FIRE_BATCH, withscores=True
            )
            for timer, due_ms in due:
                try:
                    result = await shard.scripts.fire(timer)
                except AskError as exc:
                    if exc.code == ErrorCode.REDIS_UNAVAILABLE:
                        raise
                    log.error("timer %s failed: %s", timer, exc)
                    await redis.zrem(k.timers, timer)  # a timer that cannot fire must not spin
                    continue
                if result.kind is Reply.FIRED:
                    fired += 1
                    self.fired += 1
                    _fired(timer, result.value(0, ""), max(0.0, (now - due_ms) / 1000))
            if len(due) < FIRE_BATCH:
                return fired

    async def _timer_step(self, shard: Shard, conn: Redis) -> None:
        await self.fire_due_in(shard)
        k = shard.keys
        head = await conn.zrange(k.timers, 0, 0, withscores=True)
        wait = min(self.seam.settings.block_seconds, MAX_SLEEP_S)
        if head:
            wait = min(wait, max(0.0, (head[0][1] - await server_ms(self.seam.redis)) / 1000))
        if wait > 0:
            # Woken early by a script that set an earlier timer; else at the due time.
            await conn.blpop([k.wake], timeout=max(wait, 0.001))  # type: ignore[misc, arg-type]

    # --- maintenance -----------------------------------------------------------------

    async def sweep(self) -> dict[str, int]:
        """One maintenance round; returns what it did, by kind."""
        with redis_errors(self.seam.settings):
            done = {
                "timers": await self.fire_due(),
                "callers_gone": await self.cancel_gone_callers(),
                "orphans_released": await self.release_orphans(),
                "streams_trimmed": await self.trim_streams(),
            }
        _recorder.recorder.recovered("callers_gone", done["callers_gone"])
        _recorder.recorder.recovered("orphans_released", done["orphans_released"])
        return done

    async def cancel_gone_callers(self) -> int:
        """Cancel the pending asks of caller processes whose heartbeat expired."""
        return sum([await self._cancel_gone_callers(shard) for shard in self.seam.shards])

    async def _cancel_gone_callers(self, shard: Shard) -> int:
        # A caller's heartbeat, asks and registration are in each shard it asked in.
        # Whether it is gone is checked again by the script that cancels its asks, in
        # the same step: a caller that asks meanwhile is live again, and left alone.
        k, redis, asking = shard.keys, self.seam.redis, shard.asking
        cancelled = 0
        for process in await redis.smembers(k.callers):  # type: ignore[misc]
            if await redis.exists(k.alive(process)):
                continue
            cancelled += await asking.reap_caller(process) or 0
        return cancelled

    async def release_orphans(self) -> int:
        """Claims and offers of groups with no live replica, waiting longer than
        `orphan_claim_after`: released or declined, so the waterfall moves on. A group
        whose heartbeat is overdue by less than its TTL may be live and stalled (or
        beats held by a failover): what it holds is left to it until its grace ends."""
        idle_ms = int(self.seam.settings.orphan_claim_after * 1000)
        moved = 0
        for shard in self.seam.shards:
            registry = shard.registry
            for group, priority in (await registry.priorities()).items():
                if await registry.may_be_live(group):
                    continue  # a live replica recovers its group's entries itself
                moved += await registry.give_back_all(group, priority, SWEEPER_CONSUMER, idle_ms)
        return moved

    async def trim_streams(self) -> int:
        trimmed = 0
        for shard in self.seam.shards:
            registry = shard.registry
            priorities = set((await registry.priorities()).values())
            trimmed += sum([await registry.trim(p) for p in priorities])
        return trimmed


# --- the arq worker ------------------------------------------------------------------


async def _startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx.get("askq_settings") or Settings()
    seam = Seam(settings=settings)  # connects lazily; its loops ride out Redis restarts
    try:
        await seam.check_shards()  # a sweeper counting other shards is refused
    except AskError as exc:
        if exc.code is not ErrorCode.REDIS_UNAVAILABLE:
            await seam.aclose()
            raise
        # An outage like any other: said once with the loops' failures, not beside them.
        outage.failed("the ASKQ_SHARDS check at start, skipped", exc)
    sweeper = Sweeper(seam)
    sweeper.start()
    ctx["askq_sweeper"] = sweeper
    beat = ctx["askq_sweeper_beat"] = SweeperBeat(seam, lambda: sweeper.fired)
    beat.start()


async def _shutdown(ctx: dict[str, Any]) -> None:
    beat: SweeperBeat | None = ctx.pop("askq_sweeper_beat", None)
    if beat is not None:
        await beat.stop()
    sweeper: Sweeper | None = ctx.pop("askq_sweeper", None)
    if sweeper is not None:
        await sweeper.aclose()
        await sweeper.seam.aclose()


async def sweep(ctx: dict[str, Any]) -> dict[str, int]:
    """The maintenance round (an arq cron job: one replica runs each round)."""
    sweeper: Sweeper = ctx["askq_sweeper"]
    done = await sweeper.sweep()
    if any(done.values()):
        log.info("sweep: %s", done)
    return done


# Whole seconds that divide a minute: the intervals an arq cron of seconds runs evenly.
SWEEP_STEPS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)


def sweep_step(settings: Settings) -> int:
    """ASKQ_SWEEP_INTERVAL as the cron's step; CONFIG_ERROR for one it cannot run
    evenly (a round every 7 s would run at :56 and again at :00)."""
    interval = settings.sweep_interval
    if interval not in SWEEP_STEPS:
        steps = ", ".join(map(str, SWEEP_STEPS))
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"ASKQ_SWEEP_INTERVAL {interval:g}: the maintenance round is a cron of whole"
            f" seconds that divide a minute; use one of {steps}",
        )
    return int(interval)


def worker_settings(settings: Settings | None = None) -> dict[str, Any]:
    """The arq worker's settings for these askq settings (`Worker(**worker_settings())`)."""
    settings = settings or Settings()
    step = sweep_step(settings)
    job: CronJob = cron(
        sweep,
        # Named by the prefix: arq's cron keys (arq:job:cron:<name>:<ms>) are global, and
        # two deployments on one Redis must not take each other's rounds.
        name=f"askq-sweep:{settings.prefix}",
        second=set(range(0, 60, step)),
        run_at_startup=True,
        unique=True,
        timeout=max(60, settings.sweep_interval * 10),
    )
    return {
        **worker_options(settings, Keys(settings.prefix).queue("sweeper")),
        "functions": [],
        "cron_jobs": [job],
        "on_startup": _startup,
        "on_shutdown": _shutdown,
        "ctx": {"askq_settings": settings},
    }


def __getattr__(name: str) -> Any:
    # `arq askq.sweeping._sweeper.WorkerSettings`: built from the ASKQ_* variables when arq
    # asks for it, not at import.
    if name == "WorkerSettings":
        return type("WorkerSettings", (), worker_settings())
    raise AttributeError(name)
