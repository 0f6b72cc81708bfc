"""Sending again a script call whose reply was lost, for a bounded window.

REDIS_UNAVAILABLE after a send (a timeout, a connection lost with the reply, a
failover) does not say whether the script ran; only a connection that could not be
made (NotConnected) proves it did not. A caller's ask (`_pending.py`) and a group's
answer (`_answering.py`) are then sent again, marked as repeats, until Redis answers,
and the script tells a repeat of a send that ran from a first send: an ask attaches to
the request its first send created, or gets its settlement; an answer that landed is
the group's. So what a first send wrote must still be there when its repeat comes:
a request's reply key lasts at least `REPLY_MIN_TTL_S` after its settlement whatever
`ASKQ_SETTLED_TTL` (lua/common.lua, the same figure), and a send is repeated for at
most `REPEAT_WINDOW_S` after its first try (the difference covers a repeat on the
wire); after that it fails REDIS_UNAVAILABLE, saying the first send may have run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..protocol._errors import AskError, ErrorCode
from ._full import is_full
from ._wire import NotConnected

log = logging.getLogger("askq.seam")

REPEAT_WINDOW_S = 120.0
REPLY_MIN_TTL_S = 150  # lua/common.lua, REPLY_MIN_TTL
FIRST_PAUSE = 0.05
MAX_PAUSE = 2.0

T = TypeVar("T")


def never_sent(exc: AskError) -> bool:
    """The send did not run: it never reached Redis, or Redis refused it whole because
    it is full (`_full.py`)."""
    return isinstance(exc.__cause__, NotConnected) or is_full(exc)


def window_over(first_try: float, exc: AskError) -> AskError | None:
    """The error to fail with once the repeats of a send begun at `first_try`
    (time.monotonic()) have run out of their window, else None."""
    if time.monotonic() - first_try <= REPEAT_WINDOW_S:
        return None
    error = AskError(
        ErrorCode.REDIS_UNAVAILABLE,
        f"{exc.message}; sent again for {REPEAT_WINDOW_S:g} s with no reply from Redis"
        " (the first send may have run)",
    )
    return error


async def repeated(send: Callable[[bool], Awaitable[T]], what: str) -> T:
    """`send(resent)` until Redis answers it: a send whose reply was lost is sent
    again (resent=True) with a pause doubling from 50 ms to 2 s, for at most
    REPEAT_WINDOW_S; one that never reached Redis fails at once."""
    first_try, resent, pause = time.monotonic(), False, FIRST_PAUSE
    while True:
        try:
            return await send(resent)
        except AskError as exc:
            if exc.code is not ErrorCode.REDIS_UNAVAILABLE or (not resent and never_sent(exc)):
                raise
            over = window_over(first_try, exc)
            if over is not None:
                raise over from exc.__cause__
            log.warning("%s: no reply from Redis (%s); sending it again", what, exc.message)
            resent = True
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
