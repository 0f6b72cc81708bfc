"""Retried side effects of a channel (`GroupHandle.send`), as arq jobs.

A send is `answerer.<job>(**kwargs)`: a Slack post, an email. It is queued in Redis on
the group's own queue, so any live replica of the group runs it, and a replica killed
mid-send leaves it queued for another (arq re-runs a job whose worker died once its
in-progress mark lapses). It is tried with exponential backoff (or after
`RetryLater.seconds`) up to `Answerer.send_tries` times, then handed to
`Answerer.send_failed`. A channel outage delays a question; it never loses it.

arq polls its queue (every `ASKQ_POLL_DELAY`), which is fine for retries but not for a
question's first post: the replica that queues a send starts it at once, through arq's
own claim (`Worker.start_jobs`: an in-progress mark set under WATCH), so the job runs
once whichever replica polls it too. Only retries and the sends of a dead replica wait
for a poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from arq import Retry
from arq.connections import ArqRedis
from arq.worker import Function, Worker, func

from ..protocol import _recorder, _tracing
from ..protocol._settings import Settings
from ..redis._arq import arq_pool, arq_worker, close_worker, run_supervised
from ..redis._connections import redis_errors
from ..redis._keys import Keys
from ._answerer import Answerer, RetryLater

log = logging.getLogger("askq.sends")

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 60.0
SEND_TIMEOUT = 60.0
JOB = "askq_send"
FAILURES_KEPT = 1000
FAILURE_TEXT_MAX = 500


def backoff(attempt: int) -> float:
    """Seconds before try `attempt + 1` (attempt counts from 1)."""
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (attempt - 1)))


GaveUp = Callable[[str, dict[str, Any], BaseException], Awaitable[None]]


async def run_send(
    answerer: Answerer[Any],
    job: str,
    kwargs: dict[str, Any],
    attempt: int,
    gave_up: GaveUp | None = None,
) -> float | None:
    """Try a send once. None when done (succeeded, or failed for good: recorded by
    `gave_up` and handed to `send_failed`); otherwise the seconds to wait before the
    next try."""

    method = getattr(answerer, job, None)
    if method is None or job.startswith("_"):
        log.error("%s has no send %r; dropped", answerer.kind, job)
        return None
    try:
        await method(**kwargs)
        _recorder.recorder.sent(answerer.group.name, answerer.kind, "ok")
        return None
    except RetryLater as exc:
        delay: float = exc.seconds
        error: BaseException = exc
    except Exception as exc:  # noqa: BLE001 - a failed send is retried, never fatal
        delay, error = backoff(attempt), exc
    if attempt >= answerer.send_tries:
        _recorder.recorder.sent(answerer.group.name, answerer.kind, "failed")
        log.warning("%s send %s gave up after %d tries: %s", answerer.kind, job, attempt, error)
        if gave_up is not None:
            try:
                await gave_up(job, kwargs, error)
            except Exception:  # noqa: BLE001 - the record is best effort
                log.exception("recording the failed send %s failed", job)
        try:
            await answerer.send_failed(job, kwargs, error)
        except Exception:  # noqa: BLE001
            log.exception("%s send_failed(%s) failed", answerer.kind, job)
        return None
    _recorder.recorder.sent(answerer.group.name, answerer.kind, "retry")
    log.info(
        "%s send %s failed (try %d), again in %.1f s: %s", answerer.kind, job, attempt, delay, error
    )
    return delay


async def _askq_send(
    ctx: dict[str, Any], job: str, kwargs: dict[str, Any], trace: str | None = None
) -> None:
    answerer: Answerer[Any] = ctx["answerer"]

    async def gave_up(job: str, kwargs: dict[str, Any], error: BaseException) -> None:
        # What `askq status` lists as failed sends (capped).
        fields = {
            "queue": ctx["askq_queue"],
            "kind": answerer.kind,
            "job": job,
            "request": str(kwargs.get("request_id", "")),
            "error": f"{type(error).__name__}: {error}"[:FAILURE_TEXT_MAX],
            "tries": str(ctx["job_try"]),
        }
        await ctx["redis"].xadd(
            ctx["askq_failures"], fields, maxlen=FAILURES_KEPT, approximate=True
        )

    with _tracing.joined(
        f"askq.send {job}",
        trace,
        group=answerer.group.name,
        channel=answerer.kind,
        attempt=ctx["job_try"],
    ):
        delay = await run_send(answerer, job, kwargs, ctx["job_try"], gave_up)
    if delay is not None:
        raise Retry(defer=delay)


class SendQueue:
    """One group's queue of sends: `enqueue` from anywhere, `run` in each replica."""

    def __init__(self, settings: Settings, queue: str, answerer: Answerer[Any]) -> None:
        self.settings = settings
        self.queue = queue
        self.answerer = answerer
        self._pool: ArqRedis | None = None
        self._worker: Worker | None = None
        self._starting: set[asyncio.Task[None]] = set()

    async def enqueue(self, job: str, kwargs: dict[str, Any]) -> None:
        if self._pool is None:
            self._pool = await arq_pool(self.settings, self.queue)
        # The span that queued it (a channel's present) is the send's parent, in
        # whichever replica runs it.
        trace = _tracing.current_traceparent()
        args = (job, kwargs, trace) if trace else (job, kwargs)
        # REDIS_UNAVAILABLE when Redis is out of reach or full: the channel's step fails
        # (a question not shown is given back), as any other step on Redis would.
        with redis_errors(self.settings):
            queued = await self._pool.enqueue_job(JOB, *args, _queue_name=self.queue)
        if queued is not None:
            self._start_now(queued.job_id)

    def _start_now(self, job_id: str) -> None:
        """Run a just-queued send here without waiting for the next poll. A worker not
        (or no longer) connected leaves it to the poll of whichever replica is."""
        worker = self._worker
        if worker is None or worker._pool is None:
            return
        # In a task: start_jobs waits for a free job slot, and enqueue must not.
        task = asyncio.create_task(worker.start_jobs([job_id.encode()]))
        self._starting.add(task)
        task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A lost connection here is harmless: the job is queued and gets polled.
            log.info("starting a send at once failed: %s", task.exception())

    async def run(self) -> None:
        # arq counts a try that raised Retry; run_send gives up at send_tries itself,
        # so arq's own limit is one above and never cuts a send short.
        send: Function = func(
            _askq_send,
            name=JOB,
            max_tries=self.answerer.send_tries + 1,
            timeout=SEND_TIMEOUT,
        )

        def make() -> Worker:
            ctx = {
                "answerer": self.answerer,
                "askq_queue": self.queue,
                "askq_failures": Keys(self.settings.prefix).send_failures,
            }
            self._worker = arq_worker(self.settings, self.queue, [send], ctx=ctx)
            return self._worker

        await run_supervised(f"sends of {self.queue}", make)

    async def aclose(self) -> None:
        """Stop running sends (one cut short stays queued, for this group's next run)."""
        for task in list(self._starting):
            task.cancel()
        try:
            if self._worker is not None:
                await close_worker(self._worker)
        finally:
            if self._pool is not None:
                await self._pool.aclose()
