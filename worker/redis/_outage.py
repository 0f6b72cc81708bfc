"""A Redis outage, as a process's log tells it: once when it starts, once when it ends.

Every loop that rides out an outage by trying again (the blocking loops, the
heartbeats, arq's supervisor, an ask sent again, the metrics scrape) reports each
failure and each success here, instead of logging a warning per try (a worker logged
21 lines in 6 s of one outage, more with asks pending). The first failure logs a
WARNING naming what failed and why; the tries meanwhile log at DEBUG (`-vv`); the
first success after logs a WARNING saying how long Redis was out of reach, so the two
lines pair up at the default level. One per process: its loops share one Redis.
"""

from __future__ import annotations

import logging
import time

from ..protocol._errors import AskError, ErrorCode
from ._connections import CONNECTION_ERRORS

log = logging.getLogger("askq.redis")


def unreachable(exc: BaseException) -> bool:
    """Redis out of reach: a connection error, or the REDIS_UNAVAILABLE it became."""
    return isinstance(exc, CONNECTION_ERRORS) or (
        isinstance(exc, AskError) and exc.code is ErrorCode.REDIS_UNAVAILABLE
    )


class Outage:
    def __init__(self) -> None:
        self.since: float | None = None  # monotonic time of the first failure
        self.failures = 0
        self.outages = 0  # how many this process has seen (for tests and status)

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, what: str, exc: BaseException | str) -> None:
        """`what` (a loop's name) could not reach Redis, and tries again."""
        why = (str(exc) or type(exc).__name__) if isinstance(exc, BaseException) else exc
        if self.since is None:
            self.since, self.failures = time.monotonic(), 1
            self.outages += 1
            log.warning("Redis is out of reach (%s: %s); trying again until it is back", what, why)
            return
        self.failures += 1
        log.debug("%s: Redis still out of reach (%s)", what, why)

    def reached(self) -> None:
        """A command went through: the outage, if there was one, is over."""
        if self.since is None:
            return
        lasted, tries = time.monotonic() - self.since, self.failures
        self.since, self.failures = None, 0
        log.warning(
            "Redis reconnected after %.1f s (%d failed %s meanwhile)",
            lasted,
            tries,
            "try" if tries == 1 else "tries",
        )


outage = Outage()  # the process's
