"""Retried side effects of a channel (`GroupHandle.send`).

A send is `answerer.<job>(**kwargs)`: a Slack post, an email. It is tried until it
succeeds, with exponential backoff (or after `RetryLater.seconds`), up to
`Answerer.send_tries` times, then handed to `Answerer.send_failed`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ._answerer import Answerer, RetryLater

log = logging.getLogger("askq.sends")

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 60.0


def backoff(attempt: int) -> float:
    """Seconds before try `attempt + 1` (attempt counts from 1)."""
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (attempt - 1)))


async def run_send(
    answerer: Answerer[Any], job: str, kwargs: dict[str, Any], attempt: int
) -> float | None:
    """Try a send once. None when done (succeeded, or failed for good and handed to
    `send_failed`); otherwise the seconds to wait before the next try."""
    method = getattr(answerer, job, None)
    if method is None or job.startswith("_"):
        log.error("%s has no send %r; dropped", answerer.kind, job)
        return None
    try:
        await method(**kwargs)
        return None
    except RetryLater as exc:
        delay: float = exc.seconds
        error: BaseException = exc
    except Exception as exc:  # noqa: BLE001 - a failed send is retried, never fatal
        delay, error = backoff(attempt), exc
    if attempt >= answerer.send_tries:
        log.warning("%s send %s gave up after %d tries: %s", answerer.kind, job, attempt, error)
        try:
            await answerer.send_failed(job, kwargs, error)
        except Exception:  # noqa: BLE001
            log.exception("%s send_failed(%s) failed", answerer.kind, job)
        return None
    log.info(
        "%s send %s failed (try %d), again in %.1f s: %s", answerer.kind, job, attempt, delay, error
    )
    return delay


class LocalSends:
    """Sends run in this process (tasks): for tests and single-process use. A send is
    lost if the process dies before it succeeds."""

    def __init__(self, answerer: Answerer[Any]) -> None:
        self.answerer = answerer
        self._tasks: set[asyncio.Task[None]] = set()

    async def enqueue(self, job: str, kwargs: dict[str, Any]) -> None:
        task = asyncio.create_task(self._run(job, kwargs))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: str, kwargs: dict[str, Any]) -> None:
        attempt = 1
        while (delay := await run_send(self.answerer, job, kwargs, attempt)) is not None:
            await asyncio.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
