"""A sweeper's own heartbeat, so `askq status` can show which sweepers run and how
long ago each last beat (the timers stop when none does: windows, escalations,
reminders and timeouts then wait).

Each sweeper replica writes `{p}:sweepers` field `<host>:<pid>` = JSON (the server time
of its beat, its TTL, what it fired so far) every third of its TTL, and deletes it as it
stops. A beat also forgets replicas gone for an hour (killed, never deleted theirs).
It is a heartbeat, not a state transition: plain commands, like a caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Callable

from ..redis._connections import CONNECTION_ERRORS, server_ms
from ..redis._full import episode
from ..redis._heartbeat import keep_beating
from ..seam._seam import Seam

FORGET_AFTER_MS = 3_600_000


class SweeperBeat:
    def __init__(self, seam: Seam, fired: Callable[[], int]) -> None:
        self.seam = seam
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._fired = fired
        self._ttl_ms = int(seam.settings.consumer_ttl * 1000)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        period = self.seam.settings.consumer_ttl / 3
        self._task = asyncio.create_task(keep_beating(f"sweeper {self.name}", self.beat, period))

    async def beat(self) -> None:
        redis, key = self.seam.redis, self.seam.keys.sweepers
        now = await server_ms(redis)
        facts = {"beat_ms": now, "ttl_ms": self._ttl_ms, "fired": self._fired()}
        await redis.hset(key, self.name, json.dumps(facts))  # type: ignore[misc]
        episode.wrote()  # (refused when Redis is full: the beat is retried, _heartbeat.py)
        for name, raw in (await redis.hgetall(key)).items():  # type: ignore[misc]
            with contextlib.suppress(ValueError, TypeError, KeyError):
                other = json.loads(raw)
                if other["beat_ms"] + other["ttl_ms"] + FORGET_AFTER_MS < now:
                    await redis.hdel(key, name)  # type: ignore[misc]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self.seam.redis.hdel(self.seam.keys.sweepers, self.name)  # type: ignore[misc]
