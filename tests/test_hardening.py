"""Regression tests of the hardening issue (defects found by trying to break askq),
the ones that run in one process against both backends. Each test names its item.
Those that need a Redis server of their own (restarts, pauses) are in
test_hardening_faults.py; the CLI's in test_cli_errors.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from conftest import SEED, YES, YES_JSON, Backend, running

from askq import AskError, AskUserQuestionTool, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.protocol._build import idempotency_digest
from askq.protocol._checks import duration_ms
from askq.protocol._models import parse_answers, parse_input

DEPLOY = {
    "questions": [
        {
            "id": "deploy",
            "header": "Deploy",
            "question": "Deploy now?",
            "options": [{"label": "Yes"}, {"label": "No"}],
        }
    ]
}
REGION = {
    "questions": [
        {
            "id": "region",
            "header": "Region",
            "question": "Which region?",
            "options": [{"label": "eu-west-1"}, {"label": "us-east-1"}],
        }
    ]
}


def caller(agent: str = "agent", turn: str = "t1", owner: str | None = None) -> Caller:
    return Caller(agent_id=agent, turn_id=turn, owner=owner)


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


# --- 2. an idempotency key reused after its request expired -------------------------


async def test_2_key_reused_after_expiry_gets_its_own_question_answered(backend: Backend) -> None:
    async with backend.seam(settled_ttl=1) as seam, backend.seam(settled_ttl=1) as other:
        human = MemoryAnswerer()
        async with running(seam, human, "desk"):
            first = asyncio.create_task(seam.ask(DEPLOY, caller(), idempotency_key="K"))
            offer = await human.next_presented()
            # Another replica's seam learns the first request (as a Slack click would).
            assert (await other.request_info(offer.request_id)).request.questions[0].id == "deploy"
            await human.answer(offer.request_id, [{"id": "deploy", "selected": ["Yes"]}])
            await first

            async def expired() -> bool:
                # (its reply outlasts it, for an ask sent again after a lost reply:
                # _resend.py; it is not what a new ask with the key finds)
                k = seam.shard_of_request(offer.request_id).keys
                return not await seam.redis.exists(
                    k.request(offer.request_id), k.idem(idempotency_digest("K"))
                )

            await until(expired)
            second = asyncio.create_task(seam.ask(REGION, caller(), idempotency_key="K"))
            offer2 = await human.next_presented()
            assert offer2.request_id != offer.request_id  # request ids are never reused
            # The replica that cached the first request answers the second one.
            await other.answer(
                offer2.request_id, "desk", [{"id": "region", "selected": ["eu-west-1"]}], by="x"
            )
            result = await asyncio.wait_for(second, 5)
            assert result.to_json() == '{"answers":[{"id":"region","selected":["eu-west-1"]}]}'
            # And an answer to the old question is refused, not delivered.
            with pytest.raises(AskError) as err:
                await other.answer(
                    offer.request_id, "desk", [{"id": "deploy", "selected": ["Yes"]}], by="x"
                )
            assert err.value.code in (ErrorCode.NOT_FOUND, ErrorCode.ALREADY_SETTLED)


async def test_2_key_asked_again_while_kept_still_returns_its_settlement(seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        first = asyncio.create_task(seam.ask(SEED, caller(), idempotency_key="K"))
        offer = await human.next_presented()
        await human.answer(offer.request_id, YES)
        await first
        again = await seam.ask(SEED, caller(), idempotency_key="K")
        assert again.to_json() == YES_JSON
        assert human.presented.empty()
        assert await seam.idempotent_request("K") == offer.request_id


# --- 4. the same tool_call_id twice in one process ----------------------------------


async def test_4_a_refused_second_call_leaves_the_first_one_waiting(seam: Seam) -> None:
    human = MemoryAnswerer()
    async with running(seam, human, "desk"):
        tool = AskUserQuestionTool(seam)
        first = asyncio.create_task(tool.execute(SEED, caller(), tool_call_id="T"))
        offer = await human.next_presented()
        second = await tool.execute(REGION, caller(), tool_call_id="T")
        assert second.is_error and second.code is ErrorCode.INVALID_REQUEST
        assert "idempotency key" in second.content
        await asyncio.sleep(0.1)
        assert not first.done()  # still waiting for its human
        await human.answer(offer.request_id, YES)
        result = await asyncio.wait_for(first, 5)  # never raises
        assert (result.is_error, result.content) == (False, YES_JSON)


async def test_4_an_ask_whose_seam_closes_ends_with_an_error_not_a_cancellation(
    backend: Backend,
) -> None:
    human = MemoryAnswerer()
    async with backend.seam() as desk_seam, running(desk_seam, human, "desk"):
        seam = backend.seam()
        await seam.ping()
        tool = AskUserQuestionTool(seam)
        call = asyncio.create_task(tool.execute(SEED, caller()))
        await human.next_presented()
        await seam.aclose()
        result = await asyncio.wait_for(call, 5)
        assert result.is_error and result.code is ErrorCode.ABORTED


# --- 5. a timeout under 1 ms ---------------------------------------------------------


async def test_5_a_timeout_under_a_millisecond_times_out(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(seam.ask(SEED, caller(), timeout=0.0009), 5)
        assert err.value.code is ErrorCode.TIMED_OUT
        # The timer in Redis was 1 ms too (not "none"): nothing is left pending.
        assert await seam.redis.zcard(seam.keys.pending) == 0


def test_5_durations_round_up_to_whole_milliseconds() -> None:
    assert duration_ms(0.0004, "timeout") == 1
    assert duration_ms(0.0009, "timeout") == 1
    assert duration_ms(0.001, "timeout") == 1
    assert duration_ms(1.0001, "timeout") == 1001
    assert duration_ms(0, "decision_window") == 0
    for bad in (float("inf"), float("nan"), -1, 1e308, "5", True):
        with pytest.raises(AskError) as err:
            duration_ms(bad, "timeout")
        assert err.value.code is ErrorCode.INVALID_REQUEST and err.value.message.startswith(
            "timeout:"
        )


# --- 13. DELEGATED_CALLER is what the registry says ---------------------------------


async def test_13_a_registered_child_is_delegated_whatever_owner_it_claims(
    backend: Backend, seam: Seam
) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        async with seam.agent("root"), seam.agent("child", owner="root"):
            async with backend.seam() as elsewhere:  # another process asks as the child
                for claimed in (None, "someone-else", "child"):
                    with pytest.raises(AskError) as err:
                        await elsewhere.ask(SEED, caller("child", owner=claimed))
                    assert err.value.code is ErrorCode.DELEGATED_CALLER, claimed
                    assert "'root'" in err.value.message
        # Once the owner is gone, a restored child runs as a root.
        async with seam.agent("child", owner="root"), backend.seam() as elsewhere:
            task = asyncio.create_task(elsewhere.ask(SEED, caller("child")))
            await asyncio.sleep(0.3)
            assert not task.done()  # offered, waiting for its human
            task.cancel()


async def test_13_an_unregistered_caller_claiming_a_live_owner_is_delegated(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(), "desk"), seam.agent("root"):
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, caller("stranger", owner="root"))
        assert err.value.code is ErrorCode.DELEGATED_CALLER


# --- 19. INVALID_REQUEST where the input is at fault ---------------------------------


async def test_19_bad_input_is_invalid_request_naming_the_field(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        tool = AskUserQuestionTool(seam)
        deep = "[" * 5000 + "]" * 5000
        cases: list[tuple[dict[str, Any], str]] = [
            ({"args": deep}, "input"),
            ({"args": {"questions": json.loads("[" * 500 + "]" * 500)}}, "questions"),
            ({"timeout": float("inf")}, "timeout"),
            ({"timeout": 1e308}, "timeout"),
            ({"timeout": float("nan")}, "timeout"),
            ({"tool_call_id": "k\ud800"}, "tool_call_id"),
            ({"tool_call_id": "k" * 257}, "tool_call_id"),
            ({"idempotency_key": "k\ud800"}, "idempotency_key"),
        ]
        for case, field in cases:
            args = case.pop("args", SEED)
            result = await tool.execute(args, caller(), **case)
            assert result.is_error and result.code is ErrorCode.INVALID_REQUEST, (case, result)
            assert result.content.startswith(f"INVALID_REQUEST: {field}"), result.content
        scoped = AskUserQuestionTool(seam, scope={"tenant": "a\ud800"})
        result = await scoped.execute(SEED, caller())
        assert result.code is ErrorCode.INVALID_REQUEST and "scope[" in result.content
        for scope in ({"a b": "x"}, {"k": "v" * 201}, {f"k{i}": "v" for i in range(33)}):
            result = await AskUserQuestionTool(seam, scope=scope).execute(SEED, caller())
            assert result.code is ErrorCode.INVALID_REQUEST and "scope" in result.content


async def test_19_ids_that_cannot_be_keys_are_invalid_request(seam: Seam) -> None:
    for request_id in ("\ud800", "", "a" * 65, "a:b", "x\n"):
        with pytest.raises(AskError) as err:
            await seam.answer(request_id, "desk", YES, by="x")
        assert err.value.code is ErrorCode.INVALID_REQUEST, request_id
        assert err.value.message.startswith("request id")
        assert await seam.request_status(request_id) is None
        assert await seam.settlement(request_id) is None
    with pytest.raises(AskError) as err:
        await seam.abort_turn("t\ud800")
    assert err.value.code is ErrorCode.INVALID_REQUEST and err.value.message.startswith("turn")


# --- 20. error messages are bounded --------------------------------------------------


def test_20_an_unknown_key_of_a_megabyte_gives_a_short_message() -> None:
    question = dict(SEED["questions"][0], **{"k" * 1_000_000: 1})
    with pytest.raises(AskError) as err:
        parse_input({"questions": [question]})
    message = err.value.message
    assert len(message) < 400, len(message)
    assert "1,000,000 characters" in message and "Extra inputs are not permitted" in message


def test_20_twenty_thousand_problems_are_counted_not_listed() -> None:
    question = dict(SEED["questions"][0], **{f"extra{i}": 1 for i in range(20_000)})
    with pytest.raises(AskError) as err:
        parse_input({"questions": [question]})
    message = err.value.message
    assert len(message) < 2000, len(message)
    assert message.endswith("and 19,995 more problems")


def test_20_answers_that_repeat_huge_text_are_quoted_short() -> None:
    questions = parse_input(SEED).questions
    cases: list[Any] = [
        [{"id": "cleanup", "selected": ["x" * 100_000]}],
        [{"id": "x" * 100_000, "selected": []}],
        [{"id": "cleanup", "selected": [f"label {i}" for i in range(20_000)]}],
        [{"id": "cleanup", "selected": ["\x1b[2Kforged"]}],
    ]
    for raw in cases:
        with pytest.raises(AskError) as err:
            parse_answers(questions, raw)
        assert len(err.value.message) < 1000, len(err.value.message)
        assert "\x1b" not in err.value.message


# --- 7. a group has one priority and one scope ---------------------------------------


async def test_7_a_replica_with_another_priority_or_scope_is_refused(seam: Seam) -> None:
    human = MemoryAnswerer(reply=lambda offer: YES)
    async with running(seam, human, "desk", priority=10, consumer="desk-1"):
        for other in ({"priority": 5}, {"priority": 10, "scope": {"tenant": "acme"}}):
            with pytest.raises(AskError) as err:
                async with running(seam, MemoryAnswerer(), "desk", consumer="desk-2", **other):
                    pass
            assert err.value.code is ErrorCode.CONFIG_ERROR
            assert "registered with priority 10, scope *" in err.value.message
            assert "askq group remove desk" in err.value.message
        assert await seam.redis.hget(seam.keys.groups, "desk") == "10"
        # The live replica still answers.
        assert (await seam.ask(SEED, caller())).to_json() == YES_JSON
        # A replica that agrees joins.
        async with running(seam, MemoryAnswerer(), "desk", priority=10, consumer="desk-3"):
            pass


async def test_7_removing_a_group_gives_back_what_it_held_then_it_may_move(seam: Seam) -> None:
    holder = MemoryAnswerer()
    ask = None
    async with running(seam, holder, "desk", priority=10, decision_window=0):
        ask = asyncio.create_task(seam.ask(SEED, caller()))
        await holder.next_presented()
        with pytest.raises(AskError) as err:
            await seam.registry.remove("desk")
        assert err.value.code is ErrorCode.CONFIG_ERROR and "live replica" in err.value.message
    # Stopped, its claim held: removing it moves the request on (no tier left).
    assert not ask.done()
    assert await seam.registry.remove("desk") == 1
    with pytest.raises(AskError) as err:
        await asyncio.wait_for(ask, 5)
    assert err.value.code is ErrorCode.NO_ANSWERER
    assert await seam.redis.hget(seam.keys.groups, "desk") is None
    async with running(seam, MemoryAnswerer(reply=lambda o: YES), "desk", priority=5):
        assert (await seam.ask(SEED, caller())).to_json() == YES_JSON
    async with running(seam, MemoryAnswerer(), "live", priority=1):
        assert await seam.registry.prune() == ["desk"]
        assert set(await seam.redis.hkeys(seam.keys.groups)) == {"live"}


async def test_7_an_offer_no_replica_ever_read_is_given_back(seam: Seam) -> None:
    """A group whose one replica died right after registering (killed: it never read
    nor left): the offer made to it was never delivered, so it is in no replica's
    pending list. Removing the group (and the sweeper, for a group long dead) gives
    it back."""
    from askq.seam._registry import GroupSpec

    ghost = GroupSpec("desk", 0, "memory")
    await seam.scripts.register(  # what a replica's start-up writes, live for 1 s
        ghost.name, ghost.priority, ghost.info, ghost.identity, "ghost", 1000, "start"
    )
    ask = asyncio.create_task(seam.ask(SEED, caller()))
    await asyncio.sleep(0.3)
    assert not ask.done()  # offered to a group nobody reads for
    await until(lambda: _not_live(seam, "desk"))
    assert await seam.registry.remove("desk") == 1
    with pytest.raises(AskError) as err:
        await asyncio.wait_for(ask, 5)
    assert err.value.code is ErrorCode.NO_ANSWERER


async def _not_live(seam: Seam, group: str) -> bool:
    return not await seam.registry.live_replicas(group)


# --- 8, 9, 10. a channel that misbehaves does not hold questions hostage -------------


class Misbehaving(MemoryAnswerer):
    """A channel whose hooks return garbage, raise or hang, as told."""

    def __init__(self, **hooks: Any) -> None:
        super().__init__()
        self.hooks = hooks
        self.retracted_ids: list[str] = []

    async def _act(self, name: str, default: Any) -> Any:
        behaviour = self.hooks.get(name, "ok")
        if behaviour == "hang":
            await asyncio.Event().wait()
        if behaviour == "hang-ignoring-a-cancel":  # as a library that swallows one
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.Event().wait()
        if behaviour == "raise":
            raise RuntimeError(f"{name} broke")
        return default if behaviour == "ok" else behaviour

    async def decide(self, offer: Any) -> bool:
        verdict: bool = await self._act("decide", True)
        return verdict

    async def answer_at_once(self, offer: Any) -> Any:
        return await self._act("answer_at_once", None)

    async def present(self, offer: Any) -> None:
        await self._act("present", None)
        await super().present(offer)

    async def retract(self, retraction: Any) -> None:
        if self.hooks.get("retract") == "hang-first" and not self.retracted_ids:
            self.retracted_ids.append(retraction.request_id)
            await asyncio.Event().wait()
        self.retracted_ids.append(retraction.request_id)
        await super().retract(retraction)


@pytest.mark.parametrize(
    "hooks",
    [
        {"answer_at_once": 42},
        {"answer_at_once": (YES, 123)},
        {"answer_at_once": (YES,)},
        {"answer_at_once": "raise"},
        {"answer_at_once": "hang"},
        {"decide": "maybe"},
        {"decide": "raise"},
        {"decide": "hang"},
        {"present": "raise"},
        {"present": "hang"},
        {"present": "hang-ignoring-a-cancel"},
    ],
    ids=lambda hooks: "-".join(f"{k}={v}" for k, v in hooks.items()),
)
async def test_8_9_a_hook_that_fails_or_hangs_passes_the_question_on(
    backend: Backend, hooks: dict[str, Any]
) -> None:
    async with backend.seam(hook_timeout=0.5) as seam:
        humans = MemoryAnswerer()
        async with (
            running(seam, Misbehaving(**hooks), "broken", priority=0, decision_window=0),
            running(seam, humans, "humans", priority=1),
        ):
            started = time.monotonic()
            ask = asyncio.create_task(seam.ask(SEED, caller()))
            offer = await humans.next_presented(5)  # the waterfall moved on
            assert time.monotonic() - started < 3
            await humans.answer(offer.request_id, YES)
            assert (await asyncio.wait_for(ask, 5)).to_json() == YES_JSON


async def test_10_a_retract_that_hangs_does_not_stop_later_retractions(backend: Backend) -> None:
    async with backend.seam(hook_timeout=30) as seam:
        channel = Misbehaving(retract="hang-first")
        async with running(seam, channel, "desk"):
            turns = ["t1", "t2", "t3"]
            asks = [asyncio.create_task(seam.ask(SEED, caller(turn=t))) for t in turns]
            ids = [(await channel.next_presented()).request_id for _ in turns]
            for turn in turns:
                await seam.abort_turn(turn)
            await asyncio.gather(*asks, return_exceptions=True)
            # The first retraction hangs; the others still reach the channel.
            await until(lambda: _async(len(channel.retracted_ids) == 3))
            assert sorted(set(channel.retracted_ids)) == sorted(ids)


async def _async(value: Any) -> Any:
    return value


async def test_10_a_remind_that_hangs_does_not_stop_retraction(backend: Backend) -> None:
    class StuckReminder(MemoryAnswerer):
        async def remind(self, offer: Any) -> None:
            await asyncio.Event().wait()

    async with backend.seam(hook_timeout=30) as seam:
        from conftest import sweeping

        channel = StuckReminder()
        async with sweeping(backend), running(seam, channel, "desk", remind_after=0.1):
            ask = asyncio.create_task(seam.ask(SEED, caller()))
            await channel.next_presented()
            await asyncio.sleep(0.5)  # the reminder fired and hangs
            await seam.abort_turn("t1")
            retraction = await channel.next_retracted(5)
            assert retraction.state == "CANCELLED"
            with pytest.raises(AskError):
                await ask


# --- 15. agent text shown as data ----------------------------------------------------


def test_15_visible_writes_out_every_control_and_invisible_mark() -> None:
    from askq.protocol._text import quoted, visible

    deceptive = "Yes, drop it\x1b[2K\x1b[1G  1. No\u202e\x07\u200b\ufeff\r\x00"
    shown = visible(deceptive)
    assert shown == "Yes, drop it\\x1b[2K\\x1b[1G  1. No\\u202e\\x07\\u200b\\ufeff\\r\\x00"
    assert visible("one\ntwo\tthree") == "one\\ntwo\\tthree"  # a label is one line
    assert visible("one\ntwo", multiline=True) == "one\ntwo"  # a question may span lines
    assert (
        visible("emoji 👩\u200d💻, Persian می\u200cخواهم")
        == "emoji 👩\u200d💻, Persian می\u200cخواهم"
    )
    assert quoted("x" * 1000).endswith('…" (1,000 characters)') and len(quoted("x" * 1000)) < 110


# --- 9. call_hook itself: inline until the hook waits, then a task it can give up on ---


async def test_9_call_hook_runs_a_hook_inline_or_bounds_it() -> None:
    from askq.answering._hooks import call_hook

    log: list[str] = []

    async def at_once() -> str:
        return "now"

    async def raises_at_once() -> None:
        raise ValueError("no")

    async def waits(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "later"

    async def waits_then_raises() -> None:
        await asyncio.sleep(0)
        raise ValueError("later no")

    async def ignores_a_cancel() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            log.append("cancel ignored")
            await asyncio.sleep(0.3)
        return "too late"

    async def records_its_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    async def hook(call: Any, timeout: float = 1.0) -> Any:
        return await call_hook("group g", "decide", "r1", call, timeout)

    assert (await hook(at_once())).value == "now"
    assert not (await hook(raises_at_once())).ok
    assert (await hook(waits(0.01))).value == "later"
    assert not (await hook(waits_then_raises())).ok
    started = time.monotonic()
    assert not (await hook(ignores_a_cancel(), 0.1)).ok
    assert time.monotonic() - started < 0.25  # not waiting for the hook to give in
    assert not (await hook(records_its_cancel(), 0.05)).ok
    outer = asyncio.create_task(hook(records_its_cancel(), 10))
    await asyncio.sleep(0.05)
    outer.cancel()  # the runtime stopping: the hook is cancelled too
    with pytest.raises(asyncio.CancelledError):
        await outer
    await asyncio.sleep(0.35)
    assert log == ["cancel ignored", "cancelled", "cancelled"]
