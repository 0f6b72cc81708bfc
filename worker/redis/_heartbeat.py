"""Heartbeats: a key (or zset score) kept alive with a TTL, written once a period.

Three things beat: a caller process while it waits (`{p}:alive:<process>`), an agent
(`{p}:agent:<id>`), and an answerer replica (`{p}:consumers:<group>`, `{p}:live`).
Each is live for `ttl` after its last beat and beats every `ttl / 3`; a full Redis does
not stop a beat (`_full.py`). A beat that
fails (Redis slow, paused, restarting) is tried again at once, not a period later:
else one lost beat plus one slow one would let the TTL lapse while the process is
healthy, and for that moment a live group would look dead. Each try is also bounded
by the period, so the retry is queued while the TTL still has a period to run. (A
stall longer than the TTL holds every beat all the same: routing then still offers a
question with nowhere else to go to a group overdue by less than its TTL, and the
sweeper leaves its claims to it: lua/common.lua, route.) An outage is logged once per
process, as it starts and as it ends (`_outage.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ._blocking import raise_if_cancelled
from ._full import episode, is_full
from ._outage import outage, unreachable

log = logging.getLogger("askq.heartbeat")

RETRY_FIRST = 0.05
RETRY_MAX = 1.0


async def keep_beating(
    name: str,
    beat: Callable[[], Awaitable[None]],
    period: float,
    *,
    stop: asyncio.Event | None = None,
) -> None:
    """Call `beat` now and every `period` seconds until cancelled (or until `stop` is
    set). A beat that fails or takes longer than `period` is tried again at once, then
    after a pause doubling from 50 ms to at most a second (or the period, if shorter).
    Errors other than an unreachable Redis are logged and retried the same way."""
    pause = RETRY_FIRST
    while stop is None or not stop.is_set():
        raise_if_cancelled()
        try:
            await asyncio.wait_for(beat(), timeout=period)
        except Exception as exc:  # noqa: BLE001 - a heartbeat keeps beating
            if is_full(exc):  # said once an episode, not per retry
                episode.refused("heartbeat", f"heartbeat of {name}")
            elif isinstance(exc, TimeoutError) or unreachable(exc):
                outage.failed(f"{name}: heartbeat", exc if str(exc) else "timed out")
            else:
                log.exception("%s: heartbeat failed; trying again", name)
            await _wait(stop, min(pause, RETRY_MAX, period))
            pause *= 2
            continue
        pause = RETRY_FIRST
        outage.reached()
        await _wait(stop, period)


async def _wait(stop: asyncio.Event | None, seconds: float) -> None:
    """Sleep `seconds`, or until `stop` is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
