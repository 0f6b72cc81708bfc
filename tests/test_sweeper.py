"""The sweeper as an arq worker, orphaned claims, and channel sends as arq jobs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from arq.worker import Worker
from conftest import SEED, YES, YES_JSON, Backend, running

from askq import AskError, Caller, ErrorCode, RetryLater, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.redis._arq import close_worker
from askq.sweeping._sweeper import worker_settings

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)


def caller(turn: str = "t1") -> Caller:
    return Caller(agent_id="agent", turn_id=turn)


@contextlib.asynccontextmanager
async def arq_sweeper(backend: Backend, **overrides: Any) -> AsyncIterator[Worker]:
    worker = Worker(**worker_settings(backend.settings(**overrides)), handle_signals=False)
    task = asyncio.create_task(worker.async_run())
    try:
        yield worker
    finally:
        await close_worker(worker)
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_arq_sweeper_runs_timers(backend: Backend, seam: Seam) -> None:
    slow, rules = MemoryAnswerer(), MemoryAnswerer(reply=lambda offer: YES)
    async with (
        arq_sweeper(backend),
        running(seam, slow, "slack", priority=0, escalate_after=0.3),
        running(seam, rules, "rules", priority=1),
    ):
        answers = await asyncio.wait_for(seam.ask(SEED, caller()), 10)
    assert answers.to_json() == YES_JSON


async def test_orphaned_claim_is_released(backend: Backend, seam: Seam) -> None:
    """Every replica of a group died holding a claim: the sweeper's round releases it
    (after orphan_claim_after) and the waterfall moves on."""
    dead = MemoryAnswerer()
    async with running(seam, dead, "slack", priority=0):
        task = asyncio.create_task(seam.ask(SEED, caller()))
        await dead.next_presented()
    # The group is gone (its only replica left); a new tier answers what reaches it.
    async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "rules", priority=1):
        async with arq_sweeper(backend, orphan_claim_after=0.2, sweep_interval=1):
            answers = await asyncio.wait_for(task, 15)
    assert answers.to_json() == YES_JSON


class Flaky(MemoryAnswerer):
    """A channel whose sends fail: `fail` times, then succeed (or always)."""

    uses_sends = True
    send_tries = 3

    def __init__(self, fail: int, *, retry_after: float | None = None) -> None:
        super().__init__()
        self.fail = fail
        self.retry_after = retry_after
        self.tries: list[str] = []
        self.posted: asyncio.Queue[str] = asyncio.Queue()
        self.gave_up: asyncio.Queue[str] = asyncio.Queue()

    async def present(self, offer: Any) -> None:
        await self.group.send("post", request_id=offer.request_id)

    async def post(self, request_id: str) -> None:
        self.tries.append(request_id)
        if len(self.tries) <= self.fail:
            if self.retry_after is not None:
                raise RetryLater(self.retry_after, "rate limited")
            raise ConnectionError("channel down")
        self.posted.put_nowait(request_id)

    async def send_failed(self, job: str, kwargs: dict[str, Any], error: BaseException) -> None:
        self.gave_up.put_nowait(kwargs["request_id"])
        await self.group.release(kwargs["request_id"])


async def test_send_is_retried_until_it_succeeds(seam: Seam) -> None:
    channel = Flaky(fail=2, retry_after=0.1)
    async with running(seam, channel, "slack"):
        task = asyncio.create_task(seam.ask(SEED, caller()))
        request_id = await asyncio.wait_for(channel.posted.get(), 15)
        assert channel.tries == [request_id] * 3
        await channel.answer(request_id, YES)
        assert (await task).to_json() == YES_JSON


async def test_send_that_never_succeeds_releases(seam: Seam) -> None:
    """A channel that raises on every send: after its tries, the question is given
    back and the waterfall falls through (here: nobody left, NO_ANSWERER)."""
    channel = Flaky(fail=10**6, retry_after=0.05)
    async with running(seam, channel, "slack"):
        try:
            await asyncio.wait_for(seam.ask(SEED, caller()), 15)
        except AskError as exc:
            assert exc.code == ErrorCode.NO_ANSWERER
        else:
            raise AssertionError("expected NO_ANSWERER")
    assert len(channel.tries) == Flaky.send_tries
    assert channel.gave_up.qsize() == 1


async def test_first_try_of_a_send_does_not_wait_for_the_poll(backend: Backend) -> None:
    """arq polls its queue; a question's first post must not wait for that poll. With
    a 60 s poll the post still goes out at once, and a retry waits for the poll."""
    channel = Flaky(fail=0)
    async with backend.seam(poll_delay=60) as seam, running(seam, channel, "slack"):
        task = asyncio.create_task(seam.ask(SEED, caller()))
        request_id = await asyncio.wait_for(channel.posted.get(), 10)
        await channel.answer(request_id, YES)
        assert (await task).to_json() == YES_JSON
    assert channel.tries == [request_id]


async def test_a_send_started_at_once_is_not_run_again_by_the_poll(backend: Backend) -> None:
    """The replica that queues a send starts it through arq's claim, so the polls of
    every replica (here three, polling every 20 ms) leave it alone."""
    a, b, c = Flaky(fail=0), Flaky(fail=0), Flaky(fail=0)
    b.tries = c.tries = a.tries  # one record of every try, wherever it ran
    b.posted = c.posted = a.posted
    async with (
        backend.seam(poll_delay=0.02) as seam,
        running(seam, a, "slack", consumer="a"),
        running(seam, b, "slack", consumer="b"),
        running(seam, c, "slack", consumer="c"),
    ):
        tasks = [asyncio.create_task(seam.ask(SEED, caller(f"t{i}"))) for i in range(20)]
        posted = {await asyncio.wait_for(a.posted.get(), 10) for _ in tasks}
        await asyncio.sleep(0.3)  # fifteen polls of each replica
        for request_id in posted:
            await a.answer(request_id, YES)
        for task in tasks:
            assert (await task).to_json() == YES_JSON
    assert len(posted) == 20 and sorted(a.tries) == sorted(posted)
