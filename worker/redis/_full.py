"""A full Redis: used memory above `maxmemory` under `maxmemory-policy noeviction` (the
policy askq needs). Redis then refuses every command that may add data
(`OOM command not allowed when used memory > 'maxmemory'`) while reads and deletes
still work. A script is refused at its first such command only while it has written
nothing (Redis never stops one half-way), so every transition of askq's is all or
nothing under it: refused whole, or done whole.

It is an operating condition, not a bug. A write refused for memory is
REDIS_UNAVAILABLE with a message saying Redis is full and that nothing was written
(`full`), so the model, the CLI (exit status 11) and every retry loop treat it as a
Redis they cannot use for now: asks fail at once (nothing was published), the loops
(heartbeats, blocking reads, the sweeper's timers, arq's queues) keep going and retry,
and everything resumes by itself once memory is freed or `maxmemory` raised.
Liveness survives it: heartbeats do not add data (a caller's and an agent's renew
their key's expiry; a replica's re-registration is let through, lua/register.lua), so
no process looks gone because Redis was full.

Each process says so once per episode (`episode`): a WARNING at the first refusal, one
when a write went through again (with how long it was full), the gauge `askq_redis_full`
(1 while it lasts) and the counter `askq_redis_full_refusals_total` (`_metrics.py`).
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import OutOfMemoryError, ResponseError

from ..protocol import _recorder
from ..protocol._errors import AskError, ErrorCode

log = logging.getLogger("askq.redis")

# What Redis says (redis-py raises OutOfMemoryError for a reply of its own; arq's
# pipelines wrap it in a plain ResponseError quoting this text).
OOM_TEXT = "command not allowed when used memory > 'maxmemory'"


def is_full(exc: BaseException | None) -> bool:
    """Whether `exc` is Redis refusing a write for lack of memory (also as the cause of
    the AskError it was translated into)."""
    if isinstance(exc, AskError):
        return exc.code is ErrorCode.REDIS_UNAVAILABLE and is_full(exc.__cause__)
    if isinstance(exc, OutOfMemoryError):
        return True
    return isinstance(exc, ResponseError) and OOM_TEXT in str(exc)


def full(where: str, exc: BaseException) -> AskError:
    """The AskError for a write refused because Redis at `where` (a redacted URL) is
    full, written for the model and the operator alike."""
    error = AskError(
        ErrorCode.REDIS_UNAVAILABLE,
        f"Redis at {where} is full (its memory is at maxmemory and it evicts nothing), so"
        " it refuses writes: nothing was written. Try again later; an operator must free"
        " memory or raise maxmemory.",
    )
    error.__cause__ = exc
    return error


class Episode:
    """This process's view of a full Redis: from the first write it saw refused for
    memory to the first write it saw go through after."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic time of the episode's first refusal
        self.refusals = 0  # in this episode
        self.said = False  # the episode's log line is out

    @property
    def active(self) -> bool:
        return self.since is not None

    def refused(self, kind: str, what: str = "", *, say: bool = True) -> None:
        """A write was refused for lack of memory (or let through although Redis is
        full: a replica's beat). `kind` (the metric's label): command, heartbeat,
        blocking_loop, queue; `what` (the log line's): which. `say`: log it (once an
        episode). A refusal the caller is told about anyway (an ask, an answer, a CLI
        command: its AskError says it) only counts, so a one-shot `askq ask` prints its
        one error line; a long-running process's loops say it."""
        _recorder.recorder.full_refused(kind)
        self.refusals += 1
        if self.since is None:
            self.since = time.monotonic()
            _recorder.recorder.redis_full(True)
        if not say or self.said:
            return  # said once an episode, not per retry
        self.said = True
        log.warning(
            "Redis is full (OOM %s): it refuses writes until memory is freed or maxmemory"
            " is raised; asks fail REDIS_UNAVAILABLE meanwhile. This process keeps running"
            " and retries (refused: %s)",
            OOM_TEXT,
            what or kind,
        )

    def wrote(self) -> None:
        """A write Redis refuses when full went through: the episode is over."""
        if self.since is None:
            return
        seconds, refusals, said = time.monotonic() - self.since, self.refusals, self.said
        self.since, self.refusals, self.said = None, 0, False
        _recorder.recorder.redis_full(False)
        if said:
            log.warning(
                "Redis takes writes again, after %.1f s full (%d write(s) refused meanwhile)",
                seconds,
                refusals,
            )


episode = Episode()
