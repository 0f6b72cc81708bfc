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

from answerers.memory import MemoryAnswerer
from worker import AskError, AskUserQuestionTool, Caller, ErrorCode, Seam
from worker._models import duration_ms, parse_answers, parse_input

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
                k = seam.keys
                return not await seam.redis.exists(
                    k.request(offer.request_id), k.reply(offer.request_id)
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
            ({"tool_call_id": "k\ud800"}, "idempotency_key"),
            ({"tool_call_id": "k" * 257}, "idempotency_key"),
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
