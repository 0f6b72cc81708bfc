"""Idempotent asks: the same key reattaches while pending and returns the stored
settlement after; a caller that is gone has its asks cancelled by the sweeper."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from conftest import NO, NO_JSON, SEED, YES, YES_JSON, Backend, running
from redis.exceptions import TimeoutError as RedisTimeoutError
from two_runs import asked_apart

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.sweeping._sweeper import Sweeper

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


async def test_a_caller_asking_as_the_sweeper_finds_it_not_live_is_left_alone(
    backend: Backend, seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of a caller that forgot itself (nothing pending: its heartbeat key
    deleted) and asks again while a sweeper looks at it: the sweeper listed it, found
    its heartbeat gone, and the caller's new ask lands right then. Interleaved here
    step by step: the ask is published between the sweeper's look at the heartbeat and
    what it does about it. Before, the sweeper then cancelled everything in the
    caller's asked set, the fresh ask with it ("caller gone" 29 ms after it was asked);
    now the look and the cancel are one step, which finds the caller live again."""
    human = MemoryAnswerer()
    async with running(seam, human, "desk"), backend.seam() as caller_seam:
        keys = caller_seam.shard_of_turn("t1").keys  # the ask's shard (ASKQ_SHARDS)
        process = caller_seam.process_id
        # Listed among the callers, its heartbeat gone: what the sweeper read just
        # before the caller forgot itself.
        await seam.redis.sadd(keys.callers, process)  # type: ignore[misc]
        sweeper = Sweeper(seam)
        real_exists = seam.redis.exists
        asks: list[asyncio.Task[Any]] = []
        offers = []

        async def exists(*names: str) -> int:
            found = await real_exists(*names)
            if names == (keys.alive(process),) and not asks:
                # The caller asks now, after the sweeper saw no heartbeat.
                asks.append(asyncio.create_task(caller_seam.ask(SEED, caller())))
                offers.append(await human.next_presented())
            return int(found)

        monkeypatch.setattr(seam.redis, "exists", exists)
        assert await sweeper.cancel_gone_callers() == 0
        assert asks, "the sweeper never looked at the caller's heartbeat"
        monkeypatch.undo()
        assert not asks[0].done()  # still waiting for its human, not cancelled
        await human.answer(offers[0].request_id, YES)
        assert (await asks[0]).to_json() == YES_JSON


async def test_callers_asking_again_and_again_under_sweeping_sweepers_are_never_gone(
    backend: Backend, seam: Seam
) -> None:
    """The same race, run many times: callers ask one question after another (each
    answered at once, so between two asks a caller has nothing pending and forgets
    itself; a jitter of a few ms lets that land before the next ask) while sweepers
    look for gone callers without pause. No ask is ever cancelled."""
    rules = MemoryAnswerer(reply=lambda offer: YES)
    stop = asyncio.Event()
    sweeps = 0
    rng = random.Random(5)

    async def sweeping(sweeper: Sweeper) -> int:
        nonlocal sweeps
        cancelled = 0
        while not stop.is_set():
            cancelled += await sweeper.cancel_gone_callers()
            sweeps += 1
            await asyncio.sleep(0)
        return cancelled

    async def asking(caller_seam: Seam, n: int) -> list[str]:
        outcomes = []
        for i in range(60):
            try:
                outcomes.append((await caller_seam.ask(SEED, caller(f"t{n}-{i}"))).to_json())
            except AskError as exc:
                outcomes.append(f"{exc.code.value}: {exc.message}")
            await asyncio.sleep(rng.random() * 0.004)
        return outcomes

    async with (
        running(seam, rules, "rules"),
        backend.seam() as one,
        backend.seam() as two,
        backend.seam() as three,
    ):
        sweepers = [asyncio.create_task(sweeping(Sweeper(seam))) for _ in range(2)]
        try:
            outcomes = await asyncio.gather(
                *(asking(s, n) for n, s in enumerate([one, two, three]))
            )
        finally:
            stop.set()
            cancelled = sum(await asyncio.gather(*sweepers))
    assert sweeps > 10
    assert cancelled == 0
    assert [o for each in outcomes for o in each] == [YES_JSON] * 180


class LosesReplies:
    """The fault hook: the first call of script `name` in any shard runs in Redis, and its
    reply is lost (a read timeout, as a stalled server or a failover gives), once the
    test opens `gate`; `ran` tells the test it ran. `run_first=False`: the call is lost
    before it reaches Redis instead (the script did not run)."""

    def __init__(self, seam: Seam, name: str, *, run_first: bool = True) -> None:
        self.name, self.run_first = name, run_first
        self.ran, self.gate = asyncio.Event(), asyncio.Event()
        self.lost = 0
        for shard in seam.shards:
            self._hook(shard.scripts)

    def _hook(self, scripts: Any) -> None:
        real = scripts.pipeline.call

        async def call(script: Any, keys: Any, args: Any) -> Any:
            if self.lost or script is not scripts._registered.get(self.name):
                return await real(script, keys, args)
            self.lost += 1
            if self.run_first:
                await real(script, keys, args)
            self.ran.set()
            await self.gate.wait()
            raise RedisTimeoutError("Timeout reading from socket")

        scripts.pipeline.call = call


async def gone(seam: Seam, key: str) -> None:
    """Until `key` has expired."""
    for _ in range(200):
        if not await seam.redis.exists(key):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key} did not expire")


async def test_an_ask_sent_again_after_its_request_expired_is_not_asked_anew(
    backend: Backend,
) -> None:
    """ASKQ_SETTLED_TTL 1 s: an ask's first send created the request, its reply was
    lost, and by the time the ask was sent again the request had been answered and had
    expired. The repeat found nothing, created the request again and asked the human a
    second time. Now the reply outlasts the request by the repeat window: the repeat
    gets the settlement, and nothing is asked anew."""
    human = MemoryAnswerer()
    async with backend.seam(settled_ttl=1) as seam, running(seam, human, "desk"):
        lossy = LosesReplies(seam, "ask")
        task = asyncio.create_task(seam.ask(SEED, caller()))
        offer = await human.next_presented()
        await human.answer(offer.request_id, YES)
        keys = seam.shard_of_request(offer.request_id).keys
        await gone(seam, keys.request(offer.request_id))  # settled and expired
        await gone(seam, keys.audit(offer.request_id))
        lossy.gate.set()  # the ask hears its reply was lost, and sends it again
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        assert not await seam.redis.exists(keys.request(offer.request_id))  # not asked anew
        assert not await seam.redis.exists(keys.audit(offer.request_id))
        assert human.presented.empty()
        from askq.redis._resend import REPEAT_WINDOW_S, REPLY_MIN_TTL_S

        ttl = await seam.redis.ttl(keys.reply(offer.request_id))
        assert REPEAT_WINDOW_S < ttl <= REPLY_MIN_TTL_S  # the reply lasts the repeat window


async def test_a_send_is_repeated_for_its_window_then_fails_saying_so(
    seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis never answers the ask (every reply lost): it is sent again for the repeat
    window, then fails REDIS_UNAVAILABLE saying the first send may have run (and the
    ask is withdrawn in the background). Before, it was sent again forever."""
    monkeypatch.setattr("askq.redis._resend.REPEAT_WINDOW_S", 0.3)
    async with running(seam, MemoryAnswerer(), "desk"):
        for shard in seam.shards:
            monkeypatch.setattr(shard.scripts.pipeline, "call", lost_reply)
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(seam.ask(SEED, caller()), 10)
    assert err.value.code is ErrorCode.REDIS_UNAVAILABLE
    assert "sent again for 0.3 s with no reply from Redis" in err.value.message


async def lost_reply(script: Any, keys: Any, args: Any) -> Any:
    raise RedisTimeoutError("Timeout reading from socket")


async def test_an_answer_whose_reply_was_lost_is_sent_again_and_is_the_groups(
    seam: Seam,
) -> None:
    """The group's answer landed and its reply was lost (a failover): the answer failed
    REDIS_UNAVAILABLE, the channel showed the question again, and the settlement's
    event then told the group whose answer had won that it lost (with the rules
    answerer of the failover test, its present failed and the claim was released: the
    ask ended NO_ANSWERER). Now the answer is sent again until Redis answers, and a
    repeat of an answer that landed is the group's answer."""
    human = MemoryAnswerer(by="alice")
    async with running(seam, human, "desk"):
        lossy = LosesReplies(seam, "answer")
        task = asyncio.create_task(seam.ask(SEED, caller()))
        offer = await human.next_presented()
        answering = asyncio.create_task(human.answer(offer.request_id, YES))
        await lossy.ran.wait()
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON  # it landed
        lossy.gate.set()
        answers = await asyncio.wait_for(answering, 10)
        assert [a.selected for a in answers.answers] == [YES[0]["selected"]]
        settlement = await seam.settlement(offer.request_id)
        assert settlement is not None and settlement.by == "alice"
        await asyncio.sleep(0.1)  # a retraction would come from the events loop now
        assert human.retracted.empty()  # the winner is not told it lost


async def test_an_answer_lost_before_it_ran_is_sent_again_and_refused_if_another_won(
    seam: Seam,
) -> None:
    """The repeat of an answer that did not land is a first answer: refused, naming
    who answered, when another group's answer won meanwhile."""
    slack, web = MemoryAnswerer(by="slack:U1"), MemoryAnswerer(by="web:bob")
    async with running(seam, slack, "slack", 10), running(seam, web, "web", 10):
        lossy = LosesReplies(seam, "answer", run_first=False)
        task = asyncio.create_task(seam.ask(SEED, caller()))
        on_slack, on_web = await slack.next_presented(), await web.next_presented()
        losing = asyncio.create_task(slack.answer(on_slack.request_id, YES))
        await lossy.ran.wait()  # slack's answer is lost on the way
        await web.answer(on_web.request_id, NO)
        lossy.gate.set()
        with pytest.raises(AskError) as late:
            await asyncio.wait_for(losing, 10)
        assert late.value.code is ErrorCode.ALREADY_SETTLED
        assert late.value.message == "already settled: answered by web:bob"
        assert (await task).answers[0].selected == NO[0]["selected"]


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
    from askq.seam._tool import tool_call_key

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
