"""Timers: ask timeouts, decision windows, escalation, reminders; several sweepers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import SEED, YES, YES_JSON, Backend, running, sweeping

from askq import Answerer, AnswererOptions, AskError, Caller, ErrorCode, Offer, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.observing._audit import settlement_counts


def caller(turn: str = "t1") -> Caller:
    return Caller(agent_id="agent", turn_id=turn)


class Undecided(Answerer[AnswererOptions]):
    """Never decides: a hung channel."""

    kind = "undecided"

    async def decide(self, offer: Offer) -> bool:
        await asyncio.Event().wait()
        return False


class Reminded(MemoryAnswerer):
    def __init__(self) -> None:
        super().__init__()
        self.reminded: asyncio.Queue[Offer] = asyncio.Queue()

    async def remind(self, offer: Offer) -> None:
        self.reminded.put_nowait(offer)


async def test_timeout_fails_timed_out_and_retracts(seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, caller(), timeout=0.3)
        assert err.value.code == ErrorCode.TIMED_OUT
        assert err.value.exit_status == 7
        retraction = await human.next_retracted()
        assert (retraction.state, retraction.code) == ("CANCELLED", "TIMED_OUT")


async def test_timeout_default_is_marked_defaulted(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        answers = await seam.ask(SEED, caller(), timeout=0.3, on_timeout="default")
    assert answers.defaulted
    assert answers.to_json() == YES_JSON[:-1] + ',"defaulted":true}'
    status = await seam.request_status(
        (await seam.redis.zrange(seam.keys.pending, 0, -1) or [""])[0]
    )
    assert status is None  # nothing left pending


async def test_timeout_default_given_explicitly_is_validated(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, caller(), timeout=1, on_timeout="default", default=[{"id": "x"}])
        assert err.value.code == ErrorCode.INVALID_REQUEST
        no = [{"id": "cleanup", "selected": ["No, keep them"]}]
        answers = await seam.ask(SEED, caller(), timeout=0.2, on_timeout="default", default=no)
    assert answers.answers[0].selected == ["No, keep them"] and answers.defaulted


async def test_free_text_default_needs_a_default(seam: Seam) -> None:
    free = {"questions": [{"id": "why", "question": "Why?", "header": "Why", "options": []}]}
    with pytest.raises(AskError, match="free-text question"):
        await seam.ask(free, caller(), timeout=1, on_timeout="default")
    with pytest.raises(AskError, match="on_timeout"):
        await seam.ask(SEED, caller(), timeout=1, on_timeout="later")  # type: ignore[arg-type]
    with pytest.raises(AskError, match="timeout: must be > 0"):
        await seam.ask(SEED, caller(), timeout=0)


async def test_answer_before_timeout_wins(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "desk"):
        answers = await seam.ask(SEED, caller(), timeout=5)
    assert answers.to_json() == YES_JSON
    assert not await seam.redis.zcard(seam.keys.timers)  # its timeout was dropped


async def test_decision_window_falls_through(backend: Backend, seam: Seam) -> None:
    rules = MemoryAnswerer(reply=lambda offer: YES)
    async with (
        sweeping(backend),
        running(seam, Undecided(), "hung", priority=0, decision_window=0.3),
        running(seam, rules, "rules", priority=1),
    ):
        answers = await asyncio.wait_for(seam.ask(SEED, caller()), 10)
    assert answers.to_json() == YES_JSON
    assert (await rules.next_presented()).tier == 1


async def test_escalation_moves_on_and_retracts(backend: Backend, seam: Seam) -> None:
    slow, fallback = MemoryAnswerer(), MemoryAnswerer(reply=lambda offer: YES, by="rules")
    async with (
        sweeping(backend),
        running(seam, slow, "slack", priority=0, escalate_after=0.3),
        running(seam, fallback, "rules", priority=1),
    ):
        answers = await asyncio.wait_for(seam.ask(SEED, caller()), 10)
        assert answers.to_json() == YES_JSON
        retraction = await slow.next_retracted()
    assert retraction.state in ("ESCALATED", "OFFERED")
    assert retraction.reason == "escalated to another answerer"


async def test_escalation_of_one_claimer_leaves_the_other(backend: Backend, seam: Seam) -> None:
    quick, slow = MemoryAnswerer(), MemoryAnswerer()
    async with (
        sweeping(backend),
        running(seam, quick, "email", priority=0),
        running(seam, slow, "slack", priority=0, escalate_after=0.3),
    ):
        task = asyncio.create_task(seam.ask(SEED, caller()))
        offer = await quick.next_presented()
        assert (await slow.next_retracted()).request_id == offer.request_id
        status = await seam.request_status(offer.request_id)
        assert status is not None and status.claimers == ["email"]
        await quick.answer(offer.request_id, YES)
        assert (await task).to_json() == YES_JSON


async def test_reminder_reaches_the_presenting_replica(backend: Backend, seam: Seam) -> None:
    human = Reminded()
    async with sweeping(backend), running(seam, human, "desk", remind_after=0.2):
        task = asyncio.create_task(seam.ask(SEED, caller()))
        offer = await human.next_presented()
        reminded = await asyncio.wait_for(human.reminded.get(), 10)
        assert reminded.request_id == offer.request_id
        await human.answer(offer.request_id, YES)
        await task


async def test_two_sweepers_fire_each_timer_once(backend: Backend, seam: Seam) -> None:
    """Many timers due at once, two sweepers racing: every timer fires exactly once."""
    n = 40
    human = MemoryAnswerer()
    async with running(seam, human, "desk", escalate_after=0.4):
        tasks = [asyncio.create_task(seam.ask(SEED, caller(f"t{i}"))) for i in range(n)]
        ids = [(await human.next_presented()).request_id for _ in range(n)]
        async with sweeping(backend) as one, sweeping(backend) as two:
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)
            # A sweeper counts a timer once its fire returns, which may be just after
            # the caller it settled has woken.
            for _ in range(100):
                if one.fired + two.fired >= n:
                    break
                await asyncio.sleep(0.05)
            fired = one.fired + two.fired
    assert all(isinstance(r, AskError) and r.code == ErrorCode.NO_ANSWERER for r in results)
    assert fired == n  # each escalation fired once, by one of the two
    settled = await settlement_counts(seam.redis, seam.keys, ids)  # from the trails
    assert len(settled) == n and set(settled.values()) == {1}


async def test_caller_enforces_its_timeout_without_a_sweeper(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(seam.ask(SEED, caller(), timeout=0.2), 5)
    assert err.value.code == ErrorCode.TIMED_OUT


async def test_timer_of_an_expired_request_is_dropped(backend: Backend, seam: Seam) -> None:
    await seam.redis.zadd(seam.keys.timers, {"timeout|gone": 1})
    async with sweeping(backend):
        for _ in range(50):
            if not await seam.redis.zcard(seam.keys.timers):
                break
            await asyncio.sleep(0.05)
    assert not await seam.redis.zcard(seam.keys.timers)


def _unused(*_: Any) -> None: ...


async def test_ask_whose_request_redis_lost_ends_at_its_timeout(seam: Seam) -> None:
    """Redis lost the request (a restart without its data): no timer is left to fire,
    but the caller's own timeout still ends the ask, with a clear error."""
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        task = asyncio.create_task(seam.ask(SEED, caller(), timeout=0.5))
        offer = await human.next_presented()
        await seam.redis.delete(
            seam.keys.request(offer.request_id), seam.keys.payload(offer.request_id)
        )
        await seam.redis.zrem(seam.keys.timers, f"timeout|{offer.request_id}")
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(task, 5)
    assert err.value.code == ErrorCode.NOT_FOUND and "lost" in err.value.message


async def test_a_settlement_deletes_the_timeout_body_only_where_there_may_be_one(
    backend: Backend, seam: Seam
) -> None:
    """An ask writes its timeout body only with a timeout, and says so in the hash
    (`timeout`: '1' or '0'): settling a request known to have none skips the DEL. A
    request asked before that field, or a settlement that does not read the hash
    (abort_turn), may have one and deletes it. A body put by hand shows which did."""
    human = MemoryAnswerer()

    async def ask(turn: str, timeout: float | None = None) -> tuple[asyncio.Task[Any], str]:
        task = asyncio.create_task(seam.ask(SEED, caller(turn), timeout=timeout))
        return task, (await human.next_presented()).request_id

    async def answered(task: asyncio.Task[Any], request_id: str) -> None:
        await human.answer(request_id, YES)
        await task

    def keys(request_id: str) -> tuple[str, str]:
        k = seam.shard_of_request(request_id).keys
        return k.request(request_id), k.timeout_body(request_id)

    async with running(seam, human, "desk"):
        # With a timeout: its body is deleted when it is answered first.
        task, request_id = await ask("timed", timeout=60)
        req, body = keys(request_id)
        assert await seam.redis.hget(req, "timeout") == "1"  # type: ignore[misc]
        assert await seam.redis.exists(body) == 1
        await answered(task, request_id)
        assert await seam.redis.exists(body) == 0
        # Without: no DEL (the body put by hand stays).
        task, request_id = await ask("untimed")
        req, body = keys(request_id)
        assert await seam.redis.hget(req, "timeout") == "0"  # type: ignore[misc]
        await seam.redis.set(body, "by hand")
        await answered(task, request_id)
        assert await seam.redis.get(body) == "by hand"
        if backend.name == "real":  # the field keeps the hash compact
            assert await seam.redis.object("encoding", req) == "listpack"
        # Asked before the field: it may have a body, deleted.
        task, request_id = await ask("old")
        req, body = keys(request_id)
        await seam.redis.hdel(req, "timeout")  # type: ignore[misc]
        await seam.redis.set(body, "by hand")
        await answered(task, request_id)
        assert await seam.redis.exists(body) == 0
        # abort_turn does not read the hash first: it deletes.
        task, request_id = await ask("aborted")
        await seam.redis.set(keys(request_id)[1], "by hand")
        assert await seam.abort_turn("aborted") == 1
        with pytest.raises(AskError):
            await task
        assert await seam.redis.exists(keys(request_id)[1]) == 0
