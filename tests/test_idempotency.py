"""Idempotent asks: the same key reattaches while pending and returns the stored
settlement after; a caller that is gone has its asks cancelled by the sweeper."""

from __future__ import annotations

import asyncio

import pytest
from conftest import NO, NO_JSON, SEED, YES, YES_JSON, Backend, running
from two_runs import asked_apart

from askq import AskError, Caller, ErrorCode, Seam
from askq._sweeper import Sweeper
from askq.answerers.memory import MemoryAnswerer

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)


def caller(turn: str = "t1") -> Caller:
    return Caller(agent_id="agent", turn_id=turn)


async def test_restarted_caller_reattaches_and_is_not_asked_twice(
    backend: Backend, seam: Seam
) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        async with backend.seam() as crashed:  # the agent process before its restart
            pending = asyncio.create_task(crashed.ask(SEED, caller("t2"), idempotency_key="call-2"))
            offer = await human.next_presented()
            # The process "dies": it stops listening (in the shard of the ask's turn).
            await crashed.shard_of_turn("t2").asking.waiter.aclose()
            async with backend.seam() as restarted:
                again = asyncio.create_task(
                    restarted.ask(SEED, caller("t2"), idempotency_key="call-2")
                )
                await asyncio.sleep(0.2)
                assert human.presented.empty()  # the human is not asked twice
                await human.answer(offer.request_id, YES)
                assert (await asyncio.wait_for(again, 5)).to_json() == YES_JSON
                # After it settled, the same key returns the stored settlement at once,
                # and says which request it was (as when it is out and waited on).
                ids: list[str] = []
                repeat = await restarted.ask(
                    SEED, caller("t2"), idempotency_key="call-2", on_published=ids.append
                )
                assert repeat.to_json() == YES_JSON
                assert ids == [offer.request_id]
            pending.cancel()


async def test_a_live_caller_whose_ask_is_taken_over_is_told(backend: Backend, seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"), backend.seam() as other:
        first = asyncio.create_task(seam.ask(SEED, caller(), idempotency_key="k"))
        offer = await human.next_presented()
        second = asyncio.create_task(other.ask(SEED, caller(), idempotency_key="k"))
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(first, 5)
        assert err.value.code == ErrorCode.ABORTED and "idempotency key" in err.value.message
        await human.answer(offer.request_id, NO)
        assert (await asyncio.wait_for(second, 5)).answers[0].selected == ["No, keep them"]


async def test_same_key_in_one_process_shares_the_wait(seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        one = asyncio.create_task(seam.ask(SEED, caller(), idempotency_key="k"))
        offer = await human.next_presented()
        two = asyncio.create_task(seam.ask(SEED, caller(), idempotency_key="k"))
        await asyncio.sleep(0.1)
        await human.answer(offer.request_id, YES)
        assert (await one).to_json() == (await two).to_json() == YES_JSON


async def test_same_key_other_questions_is_refused(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "desk"):
        await seam.ask(SEED, caller(), idempotency_key="k")
        other = {"questions": [{**SEED["questions"][0], "question": "Something else?"}]}
        with pytest.raises(AskError) as err:
            await seam.ask(other, caller(), idempotency_key="k")
    assert err.value.code == ErrorCode.INVALID_REQUEST
    assert "already used for other questions" in err.value.message


async def test_gone_caller_is_cancelled_by_the_sweeper(backend: Backend, seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        gone = backend.seam(caller_ttl=0.5)
        task = asyncio.create_task(gone.ask(SEED, caller()))
        offer = await human.next_presented()
        # The process dies: no more heartbeats, nobody listening.
        asking = gone.shard_of_turn("t1").asking  # the ask's shard (ASKQ_SHARDS)
        assert asking._beating is not None
        asking._beating.cancel()
        await asking.waiter.aclose()
        task.cancel()
        await asyncio.sleep(0.8)
        sweeper = Sweeper(seam)
        assert await sweeper.cancel_gone_callers() == 1
        retraction = await human.next_retracted()
        assert retraction.request_id == offer.request_id
        assert (retraction.state, retraction.by) == ("CANCELLED", "caller gone")
        keys = seam.shard_of_turn("t1").keys
        assert not await seam.redis.sismember(keys.callers, gone.process_id)
        assert await sweeper.cancel_gone_callers() == 0
        await gone.redis.aclose()


async def test_live_caller_is_left_alone(backend: Backend, seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"), backend.seam(caller_ttl=0.6) as live:
        task = asyncio.create_task(live.ask(SEED, caller()))
        offer = await human.next_presented()
        await asyncio.sleep(1.0)  # longer than its ttl: only heartbeats keep it
        assert await Sweeper(seam).cancel_gone_callers() == 0
        await human.answer(offer.request_id, YES)
        assert (await task).to_json() == YES_JSON


async def test_tool_call_id_makes_the_tool_idempotent(seam: Seam) -> None:
    from askq import AskUserQuestionTool

    human = MemoryAnswerer(reply=lambda offer: YES)
    tool = AskUserQuestionTool(seam, timeout=30, on_timeout="default")
    async with running(seam, human, "desk"):
        first = await tool.execute(SEED, caller(), tool_call_id="toolu_01")
        again = await tool.execute(SEED, caller(), tool_call_id="toolu_01")
    assert first.content == again.content == YES_JSON
    assert human.presented.qsize() == 1  # the human was asked once


async def test_the_same_tool_call_id_in_two_turns_is_asked_apart(seam: Seam) -> None:
    """A tool-call id is unique only within its run (a test model's `call_1` is in every
    run): two turns calling with the same id are two questions, each with its answer,
    and a turn run again (a restarted agent) gets its own answer, asked once."""
    from askq import AskUserQuestionTool

    human = MemoryAnswerer()
    tool = AskUserQuestionTool(seam)

    async def start(i: int) -> str:
        return (await tool.execute(SEED, caller(f"turn-{i}"), tool_call_id="call_1")).content

    async with running(seam, human, "desk"):
        results, offers = await asked_apart(human, start)
        again = await tool.execute(SEED, caller("turn-0"), tool_call_id="call_1")
        assert human.presented.empty()
        # run_id names the run instead of the turn: a third run, the same call id.
        other = asyncio.create_task(
            tool.execute(SEED, caller("turn-0"), tool_call_id="call_1", run_id="run-9")
        )
        offer = await human.next_presented(20)
        await human.answer(offer.request_id, NO)
        assert (await other).content == NO_JSON
    assert results == [YES_JSON, NO_JSON, NO_JSON] and again.content == YES_JSON


async def test_a_tool_call_without_a_run_has_no_key(seam: Seam) -> None:
    """An empty run id is refused, never replaced by a key two runs could share."""
    from askq import AskUserQuestionTool
    from askq._tool import tool_call_key

    for run in ("", [], ["", ""]):
        with pytest.raises(AskError) as info:
            tool_call_key("agent", run, "call_1")
        assert info.value.code is ErrorCode.CONFIG_ERROR
        assert "no id unique to its run" in info.value.message
    result = await AskUserQuestionTool(seam).execute(SEED, caller(), tool_call_id="c", run_id="")
    assert result.is_error and result.code is ErrorCode.CONFIG_ERROR
    # Ids that only look alike as text are different runs.
    assert tool_call_key("a", ["x:y", "z"], "c") != tool_call_key("a", ["x", "y:z"], "c")


async def test_tool_timeout_default_tells_the_model(seam: Seam) -> None:
    from askq import AskUserQuestionTool

    tool = AskUserQuestionTool(seam, timeout=0.2, on_timeout="default")
    async with running(seam, MemoryAnswerer(), "desk"):
        result = await tool.execute(SEED, caller())
    assert not result.is_error
    assert result.content.endswith(',"defaulted":true}')
    failing = await tool.execute(SEED, caller(), timeout=0.2, on_timeout="fail")
    assert failing.is_error  # no live group now: NO_ANSWERER before any timeout


async def test_a_caller_with_nothing_pending_leaves_no_trace(backend: Backend) -> None:
    async with (
        backend.seam(caller_ttl=0.3) as seam,
        running(seam, MemoryAnswerer(reply=lambda offer: YES), "desk"),
    ):
        await seam.ask(SEED, caller())
        k = seam.shard_of_turn("t1").keys  # the ask's shard (ASKQ_SHARDS)
        for _ in range(50):
            if not await seam.redis.exists(k.callers, k.alive(seam.process_id)):
                break
            await asyncio.sleep(0.05)
        assert not await seam.redis.exists(k.callers, k.alive(seam.process_id))
        # ... and asking again registers it again.
        task = asyncio.create_task(seam.ask(SEED, caller("t2")))
        await task
