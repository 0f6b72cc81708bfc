"""Runs of one agent whose tool calls have the same id (a test model's `call_1`), side
by side and one after another: each run must be asked, and get its own answer. An
idempotency key built from the call id alone is shared by the runs: the second then
waits on the first one's question, or gets its answer without anyone being asked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from conftest import NO, YES

from askq import Offer
from askq.answerers.memory import MemoryAnswerer

# What the human answers each run: the first two run side by side, the third after.
ANSWERS = [YES, NO, NO]


async def asked_apart(
    human: MemoryAnswerer,
    start: Callable[[int], Awaitable[Any]],
    answer: Callable[[int, Offer], Any] = lambda i, offer: ANSWERS[i],
) -> tuple[list[Any], list[Offer]]:
    """Three runs (`start(i)` runs run i to its end): the first two side by side, the
    third once they are answered. Returns their results and the offers the human saw,
    one per run. `answer(i, offer)`: what the human answers run i (`ANSWERS[i]`)."""
    runs: list[asyncio.Future[Any]] = []
    offers: list[Offer] = []
    try:
        for i in range(2):
            runs.append(asyncio.ensure_future(start(i)))
            offers.append(await _asked(human, i))
        for i in (1, 0):
            await human.answer(offers[i].request_id, answer(i, offers[i]))
        results = [await asyncio.wait_for(run, 20) for run in runs]
        runs.append(asyncio.ensure_future(start(2)))
        offers.append(await _asked(human, 2))
        await human.answer(offers[2].request_id, answer(2, offers[2]))
        results.append(await asyncio.wait_for(runs[2], 20))
    finally:
        for run in runs:
            run.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*runs, return_exceptions=True)
    assert len({o.request_id for o in offers}) == 3, "two runs shared one question"
    assert human.presented.empty()
    return results, offers


async def _asked(human: MemoryAnswerer, i: int) -> Offer:
    try:
        return await human.next_presented(20)
    except TimeoutError:
        raise AssertionError(
            f"run {i + 1} was never asked: it shared an earlier run's question"
        ) from None
