"""The Slack answerer end to end over the signed HTTP endpoint, against the stand-in:
a question asked from Python, posted as Block Kit, answered by a (simulated) click."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from conftest import NO, NO_JSON, SEED, YES_JSON, Backend, running, sweeping
from slack_standin import (
    ALICE,
    BOB,
    MALLORY,
    SlackStandIn,
    block_actions,
    form,
    post_interaction,
    sign,
    slack_settings,
    standin,
    view_submission,
)

from askq import Answers, AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.answerers.slack import SlackAnswerer
from askq.answerers.slack._interactions import SlackUser

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
ACME = {"tenant": "acme"}

LANGS: dict[str, Any] = {
    "id": "langs",
    "header": "Languages",
    "question": "Which languages should the build target?",
    "multiSelect": True,
    "options": [
        {"label": "Python (Recommended)", "description": "The main code base."},
        {"label": "Go", "description": "The CLI."},
        {"label": "Rust (Recommended)", "description": "The hot path."},
    ],
}
REGION: dict[str, Any] = {
    "id": "region",
    "header": "Region",
    "question": "Where should it deploy?",
    "options": [
        {"label": "eu-west-1 (Recommended)", "description": "Closest to the users."},
        {"label": "us-east-1", "description": "Cheapest."},
    ],
}
NAME: dict[str, Any] = {"id": "name", "header": "Name", "question": "What is the project called?"}
# Agent text that would ping the channel, mention someone and hide a link, were it not
# escaped: in a header, a question, a label, a description, the caller's ids.
HOSTILE: dict[str, Any] = {
    "id": "deploy",
    "header": "<!channel> & go",
    "question": "<!here> <@U123> read <http://evil.example|click> & answer",
    "options": [
        {"label": "<@U123> yes & <!channel>", "description": "<http://evil.example|click> &"},
        {"label": "<!here> no"},
    ],
}
HOSTILE_FREE: dict[str, Any] = {
    "id": "why",
    "header": "<@U123> why",
    "question": "<!channel> explain & <http://evil.example|click>",
}
HOSTILE_CALLER = Caller(agent_id="agent-<!here>", turn_id="turn-<@U123>")
AGENT_MARKUP = ("<!", "<@U123>", "<http")


@contextlib.asynccontextmanager
async def slack_worker(
    backend: Backend,
    standin: SlackStandIn,
    *,
    group: str = "slack",
    priority: int = 0,
    consumer: str | None = None,
    escalate_after: float | None = None,
    **extra: Any,
) -> AsyncIterator[SlackAnswerer]:
    async with backend.seam() as worker_seam:
        answerer = SlackAnswerer(settings=slack_settings(standin, **extra))
        async with running(
            worker_seam, answerer, group, priority, consumer=consumer, escalate_after=escalate_after
        ):
            yield answerer


def asking(
    seam: Seam, questions: Any, scope: dict[str, str] | None = None, caller: Caller = CALLER
) -> asyncio.Task[Answers]:
    return asyncio.create_task(seam.ask(questions, caller, scope=ACME if scope is None else scope))


async def click(slack: SlackAnswerer, payload: dict[str, Any]) -> None:
    assert slack.http_port is not None
    status, text = await post_interaction(slack.http_port, payload)
    assert (status, text) == (200, "")


async def answered(task: asyncio.Task[Answers]) -> str:
    return (await asyncio.wait_for(task, 10)).to_json()


def dumped(call: dict[str, Any]) -> str:
    return json.dumps(call["blocks"], ensure_ascii=False)


def mrkdwn_texts(value: Any) -> Iterator[str]:
    """Every text of a recorded call's arguments that Slack reads as mrkdwn: the
    top-level `text` (notification, screen reader, ephemeral) and each mrkdwn text
    object in its blocks or its view's."""
    if isinstance(value, dict):
        if isinstance(value.get("text"), str) and value.get("type", "mrkdwn") == "mrkdwn":
            yield value["text"]
        for inner in value.values():
            yield from mrkdwn_texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from mrkdwn_texts(inner)


def agent_markup(standin: SlackStandIn) -> list[str]:
    """The mrkdwn texts of every Slack call that carry agent markup unescaped."""
    return [
        text
        for call in standin.calls
        for text in mrkdwn_texts(call.args)
        if any(markup in text for markup in AGENT_MARKUP)
    ]


async def test_a_click_answers_and_the_caller_gets_the_exact_json(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        assert message.channel == "C0ACME"
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        assert await answered(task) == YES_JSON
        update = (await standin.wait_for("chat.update"))[0]
        assert (update["channel"], update["ts"]) == (message.channel, message.ts)
        assert "✅ *Answered* by <@UALICE>" in dumped(update)
        assert "*Yes, delete them (Recommended)*" in dumped(update)
        assert "askq.pick" not in dumped(update)  # no buttons left
        settlement = await seam.settlement(message.request_id)
        assert settlement is not None and settlement.by == "slack:UALICE (alice)"


async def test_forged_and_stale_requests_are_refused(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        assert slack.http_port is not None
        task = asking(seam, SEED)
        message = await standin.message()
        body = form(block_actions(message, ALICE, "askq.pick.0"))
        forged = sign(body, secret="not-the-secret")
        assert await post_interaction(slack.http_port, None, body=body, headers=forged) == (
            401,
            "invalid signature",
        )
        stale = sign(body, timestamp=int(time.time()) - 301)
        assert await post_interaction(slack.http_port, None, body=body, headers=stale) == (
            401,
            "stale request timestamp (more than 5 minutes off)",
        )
        tampered = sign(body)
        status, _ = await post_interaction(
            slack.http_port, None, body=body.replace("pick.0", "pick.1"), headers=tampered
        )
        assert status == 401
        unsigned = {"Content-Type": "application/x-www-form-urlencoded"}
        status, _ = await post_interaction(slack.http_port, None, body=body, headers=unsigned)
        assert status == 401
        await standin.settle()
        assert not task.done()
        assert standin.calls_to("chat.update") == []
        status_row = await seam.request_status(message.request_id)
        assert status_row is not None and status_row.state == "CLAIMED"
        task.cancel()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("nothing=here", "malformed interaction: body: no `payload` field"),
        ("payload=%7Bnot-json", "malformed interaction: payload: not valid JSON"),
        (form([1, 2]), "malformed interaction: payload: expected an object"),
        (form({"type": "block_actions", "actions": 3}), "actions: expected a list"),
        (
            form(
                {
                    "type": "block_actions",
                    "user": {"id": "UALICE"},
                    "actions": [{"block_id": "askq:x:r1", "action_id": "askq.other"}],
                }
            ),
            "actions[0].block_id: expected an option index",
        ),
    ],
)
async def test_malformed_interactions_get_400_and_the_worker_goes_on(
    backend: Backend, seam: Seam, standin: SlackStandIn, body: str, message: str
) -> None:
    async with slack_worker(backend, standin) as slack:
        assert slack.http_port is not None
        status, text = await post_interaction(slack.http_port, None, body=body, headers=sign(body))
        assert status == 400 and message in text
        task = asking(seam, SEED)  # still serving
        await click(slack, block_actions(await standin.message(), ALICE, "askq.pick.1"))
        assert "No, keep them" in await answered(task)


async def test_unlisted_user_is_refused_and_nothing_is_recorded(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        await click(slack, block_actions(message, MALLORY, "askq.pick.0"))
        ephemeral = (await standin.wait_for("chat.postEphemeral"))[0]
        assert ephemeral["user"] == "UMALLORY" and ephemeral["channel"] == "C0ACME"
        assert "not on the list" in ephemeral["text"]
        await standin.settle()
        assert not task.done()
        assert standin.calls_to("chat.update") == []
        # the route's allowlist names Bob too, though the default allowlist does not
        await click(slack, block_actions(message, BOB, "askq.pick.1"))
        assert "No, keep them" in await answered(task)


async def test_double_click_gets_already_answered_and_changes_nothing(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        assert await answered(task) == YES_JSON
        await standin.wait_for("chat.update")
        await click(slack, block_actions(message, BOB, "askq.pick.1"))
        ephemeral = (await standin.wait_for("chat.postEphemeral"))[0]
        assert ephemeral["user"] == "UBOB"
        assert ephemeral["text"] == "Already answered in Slack by alice. Nothing was recorded."
        await standin.settle()
        # once: not again for Bob, nor twice when the click beat the post's bookkeeping
        assert len(standin.calls_to("chat.update")) == 1
        settlement = await seam.settlement(message.request_id)
        assert settlement is not None and settlement.by == "slack:UALICE (alice)"


async def test_an_outcome_is_shown_once_and_a_failed_update_is_retried(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """However many runs of `update_message` there are (the click's, the post's own,
    a retried job), Slack is told each outcome once; a failed update is tried again."""
    standin.fail_next("chat.update", status=500, error="internal_error")
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        assert await answered(task) == YES_JSON
        await standin.wait_for("chat.update", 2)  # the failed one, then its retry
        for _ in range(3):
            await slack.update_message(message.request_id)
        await standin.settle()
        assert len(standin.calls_to("chat.update")) == 2


async def test_click_after_the_turn_was_aborted(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        await seam.abort_turn(CALLER.turn_id)
        with pytest.raises(AskError) as info:
            await asyncio.wait_for(task, 10)
        assert info.value.code is ErrorCode.ABORTED
        update = (await standin.wait_for("chat.update"))[0]
        assert "🚫 *Cancelled* (the turn was aborted)" in dumped(update)
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        ephemeral = (await standin.wait_for("chat.postEphemeral"))[0]
        assert "Already answered" in ephemeral["text"] and "cancelled" in ephemeral["text"]
        await standin.settle()
        assert len(standin.calls_to("chat.update")) == 1
        settlement = await seam.settlement(message.request_id)
        assert settlement is not None and settlement.state == "CANCELLED"


async def test_multi_select_submit(backend: Backend, seam: Seam, standin: SlackStandIn) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, [LANGS])
        message = await standin.message()
        _, boxes = message.element("askq.check")
        assert boxes["type"] == "checkboxes"
        assert [o["description"]["text"] for o in boxes["options"]] == [
            "The main code base.",
            "The CLI.",
            "The hot path.",
        ]
        # Selection changes are kept in Redis: the Submit click carries no state here,
        # as if it landed at another replica than the checkbox events. They may arrive
        # out of order: the later change (by Slack's action_ts) wins.
        earlier = block_actions(message, ALICE, "askq.check", selected=[2])
        later = block_actions(message, ALICE, "askq.check", selected=[0, 2])
        await click(slack, later)
        await standin.settle(0.2)
        await click(slack, earlier)
        await standin.settle(0.2)
        await click(slack, block_actions(message, ALICE, "askq.submit"))
        assert await answered(task) == (
            '{"answers":[{"id":"langs","selected":["Python (Recommended)","Rust (Recommended)"]}]}'
        )
        update = (await standin.wait_for("chat.update"))[0]
        assert "*Python (Recommended)*, *Rust (Recommended)*" in dumped(update)


async def test_other_opens_a_modal_and_its_text_is_the_custom_answer(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        payload = block_actions(message, ALICE, "askq.other")
        await click(slack, payload)
        opened = (await standin.wait_for("views.open"))[0]
        assert opened["trigger_id"] == payload["trigger_id"]
        view = opened["view"]
        assert view["submit"]["text"] == "Answer"
        await click(slack, view_submission(view, ALICE, "  Only the .tmp ones  "))
        assert await answered(task) == (
            '{"answers":[{"id":"cleanup","selected":[],"custom":"Only the .tmp ones"}]}'
        )
        update = (await standin.wait_for("chat.update"))[0]
        assert "“Only the .tmp ones”" in dumped(update)


async def test_modal_submission_by_an_unlisted_user_is_refused(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        await click(slack, block_actions(message, MALLORY, "askq.other"))
        await standin.wait_for("chat.postEphemeral")
        assert standin.calls_to("views.open") == []  # no modal for them either
        await click(slack, block_actions(message, ALICE, "askq.other"))
        view = (await standin.wait_for("views.open"))[0]["view"]
        await click(slack, view_submission(view, MALLORY, "mine"))
        await standin.wait_for("chat.postEphemeral", 2)
        await standin.settle()
        assert not task.done()
        task.cancel()


async def test_two_questions_answered_as_one(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, [REGION, LANGS, NAME])
        message = await standin.message()
        submits = [b for b in message.blocks if b.get("block_id", "").startswith("askq:submit:")]
        assert len(submits) == 1
        # Submit too early: told what is missing, nothing recorded.
        await click(slack, block_actions(message, ALICE, "askq.submit"))
        ephemeral = (await standin.wait_for("chat.postEphemeral"))[0]
        assert ephemeral["text"] == "Please answer first: Region, Name"
        # The free-text question's modal only notes the text until Submit.
        await click(slack, block_actions(message, ALICE, "askq.other", question=2))
        view = (await standin.wait_for("views.open"))[0]["view"]
        assert view["submit"]["text"] == "Save"
        await click(slack, view_submission(view, ALICE, "askq"))
        noted = (await standin.wait_for("chat.postEphemeral", 2))[1]
        assert noted["text"].startswith("Noted your answer to *Name*")
        await click(slack, block_actions(message, ALICE, "askq.radio", question=0, selected=[1]))
        await click(slack, block_actions(message, ALICE, "askq.check", question=1, selected=[1]))
        await standin.settle(0.2)
        # The Submit click carries the message's state; it wins over what was stored.
        region_block, _ = message.element("askq.radio", 0)
        langs_block, _ = message.element("askq.check", 1)
        _, radio = message.element("askq.radio", 0)
        _, boxes = message.element("askq.check", 1)
        state = {
            region_block: {
                "askq.radio": {"type": "radio_buttons", "selected_option": radio["options"][0]}
            },
            langs_block: {
                "askq.check": {
                    "type": "checkboxes",
                    "selected_options": [boxes["options"][1], boxes["options"][2]],
                }
            },
        }
        await click(slack, block_actions(message, ALICE, "askq.submit", state=state))
        assert await answered(task) == (
            '{"answers":[{"id":"region","selected":["eu-west-1 (Recommended)"]},'
            '{"id":"langs","selected":["Go","Rust (Recommended)"]},'
            '{"id":"name","selected":[],"custom":"askq"}]}'
        )


async def test_no_route_declines_so_the_waterfall_moves_on(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    routes = json.dumps({"tenant=acme": "C0ACME"})
    async with (
        slack_worker(backend, standin, priority=0, slack_routes=routes),
        running(seam, memory, "humans", 10),
    ):
        assert "No, keep them" in await answered(asking(seam, SEED, scope={"tenant": "other"}))
    assert standin.calls_to("chat.postMessage") == []


async def test_rate_limit_is_retried_after_retry_after(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    standin.fail_next("chat.postMessage", status=429, retry_after=1)
    async with slack_worker(backend, standin) as slack:
        started = time.monotonic()
        task = asking(seam, SEED)
        message = await standin.message(2)  # the first call got the 429
        assert time.monotonic() - started >= 0.9
        assert len(standin.calls_to("chat.postMessage")) == 2
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        assert await answered(task) == YES_JSON


async def test_a_question_slack_refuses_is_released_to_the_next_tier(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    standin.fail_next("chat.postMessage", status=200, error="channel_not_found")
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    async with slack_worker(backend, standin), running(seam, memory, "humans", 10):
        assert "No, keep them" in await answered(asking(seam, SEED))
    assert len(standin.calls_to("chat.postMessage")) == 1  # not retried: it will not change


async def test_post_question_runs_once_however_often_it_is_sent(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        # a recovered claim presents again; a retried job runs again
        await asyncio.gather(*(slack.post_question(message.request_id) for _ in range(3)))
        await standin.settle()
        assert len(standin.calls_to("chat.postMessage")) == 1
        task.cancel()


async def test_answered_elsewhere_updates_the_message(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    memory = MemoryAnswerer()
    async with slack_worker(backend, standin), running(seam, memory, "console", 0):
        task = asking(seam, SEED)
        message = await standin.message()
        offer = await memory.next_presented()
        await memory.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
        assert "No, keep them" in await answered(task)
        update = (await standin.wait_for("chat.update"))[0]
        assert (update["channel"], update["ts"]) == (message.channel, message.ts)
        assert "✅ *Answered* by memory" in dumped(update)
        assert "*No, keep them*" in dumped(update)


async def test_a_click_at_another_replica_answers(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with (
        slack_worker(backend, standin, consumer="one") as one,
        slack_worker(backend, standin, consumer="two") as two,
    ):
        task = asking(seam, [LANGS])
        message = await standin.message()
        # checkboxes at one replica, Submit at the other
        await click(one, block_actions(message, ALICE, "askq.check", selected=[1]))
        await standin.settle(0.2)
        await click(two, block_actions(message, ALICE, "askq.submit"))
        assert await answered(task) == '{"answers":[{"id":"langs","selected":["Go"]}]}'
        update = (await standin.wait_for("chat.update"))[0]
        await standin.settle()
        last = standin.calls_to("chat.update")[-1]
        assert "✅ *Answered* by <@UALICE>" in dumped(last), dumped(update)


async def test_dm_route_lets_its_user_answer(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED, scope={"tenant": "dm"})
        message = await standin.message()
        assert standin.calls_to("chat.postMessage")[0]["channel"] == "UCAROL"
        assert message.channel == "DCAROL"  # the IM Slack opened; updates go there
        await click(
            slack, block_actions(message, {"id": "UCAROL", "username": "carol"}, "askq.pick.1")
        )
        assert "No, keep them" in await answered(task)
        update = (await standin.wait_for("chat.update"))[0]
        assert update["channel"] == "DCAROL"


async def test_a_reminder_goes_to_the_thread_once(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, SEED)
        message = await standin.message()
        await asyncio.gather(*(slack.post_reminder(message.request_id) for _ in range(2)))
        posts = standin.calls_to("chat.postMessage")
        assert len(posts) == 2  # the question, and one reminder
        assert posts[1]["thread_ts"] == message.ts and posts[1]["channel"] == message.channel
        task.cancel()


class QuickToGiveUp(SlackAnswerer):
    send_tries = 2


async def test_a_post_that_keeps_failing_is_released_after_its_tries(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    for _ in range(2):
        standin.fail_next("chat.postMessage", status=500, error="internal_error")
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    async with backend.seam() as worker_seam:
        async with (
            running(worker_seam, QuickToGiveUp(settings=slack_settings(standin)), "slack", 0),
            running(seam, memory, "humans", 10),
        ):
            assert "No, keep them" in await answered(asking(seam, SEED))
    assert len(standin.calls_to("chat.postMessage")) == 2  # tried twice, then released


async def test_escalated_question_is_marked_and_a_late_click_changes_nothing(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """Nobody answered in Slack within the group's escalation deadline: the sweeper
    moves the question on to the next tier, the message says so, a click is refused."""
    on_call = MemoryAnswerer()
    async with (
        sweeping(backend),
        slack_worker(backend, standin, escalate_after=1.0) as slack,
        running(seam, on_call, "on-call", priority=1),
    ):
        task = asking(seam, SEED)
        message = await standin.message()
        offer = await on_call.next_presented(timeout=10)
        update = (await standin.wait_for("chat.update"))[0]
        assert "⤴️ *Escalated* to another answerer" in dumped(update)
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        await standin.wait_for("chat.postEphemeral")
        await on_call.answer(offer.request_id, NO)
        assert await answered(task) == NO_JSON
        settlement = await seam.settlement(message.request_id)
        assert settlement is not None and settlement.by == "memory"


async def test_agent_text_reaches_slack_only_escaped(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """Every text Slack reads as mrkdwn (the message and its update, their top-level
    `text`, the modal, the ephemerals) shows agent text escaped: it cannot ping the
    channel, mention anyone or hide a link. askq's own `<@user>` stays a mention."""
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, [HOSTILE, HOSTILE_FREE], caller=HOSTILE_CALLER)
        message = await standin.message()
        post = standin.calls_to("chat.postMessage")[0]
        assert post["text"].startswith("&lt;!channel&gt; &amp; go: &lt;!here&gt; &lt;@U123&gt;")
        await click(slack, block_actions(message, ALICE, "askq.submit"))  # too early
        await click(slack, block_actions(message, ALICE, "askq.other", question=1))
        view = (await standin.wait_for("views.open"))[0]["view"]
        await click(slack, view_submission(view, ALICE, "<!channel> mine & <@U123>"))
        await standin.wait_for("chat.postEphemeral", 2)
        await click(slack, block_actions(message, ALICE, "askq.radio", question=0, selected=[0]))
        await standin.settle(0.2)
        await click(slack, block_actions(message, ALICE, "askq.submit"))
        assert await answered(task) == (
            '{"answers":[{"id":"deploy","selected":["<@U123> yes & <!channel>"]},'
            '{"id":"why","selected":[],"custom":"<!channel> mine & <@U123>"}]}'
        )
        update = (await standin.wait_for("chat.update"))[0]
    assert agent_markup(standin) == []
    assert update["text"].startswith("✅ *Answered* by <@UALICE> — &lt;!channel&gt; &amp; go")
    assert "✅ *Answered* by <@UALICE>" in dumped(update)
    assert "*&lt;@U123&gt; yes &amp; &lt;!channel&gt;*" in dumped(update)
    assert "“&lt;!channel&gt; mine &amp; &lt;@U123&gt;”" in dumped(update)
    assert "Agent `agent-&lt;!here&gt;` asks" in dumped(post)
    everything = json.dumps([c.args for c in standin.calls], ensure_ascii=False)
    assert "&amp;lt;" not in everything and "&amp;amp;" not in everything  # escaped once


async def test_please_answer_first_names_the_headers_escaped(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, [HOSTILE, NAME])
        message = await standin.message()
        await click(slack, block_actions(message, ALICE, "askq.submit"))
        ephemeral = (await standin.wait_for("chat.postEphemeral"))[0]
        assert ephemeral["text"] == "Please answer first: &lt;!channel&gt; &amp; go, Name"
        task.cancel()


async def test_an_answer_not_accepted_is_told_with_agent_text_escaped(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """The refusal repeats what it refused, which quotes the agent's labels."""
    other = {**NAME, "options": [{"label": "<!channel> & <@U123> yes"}, {"label": "b"}]}
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, [HOSTILE, other])
        message = await standin.message()
        request = (await seam.request_info(message.request_id)).request
        # each question answered with a label of the other: not one of its options
        answers = [
            {"id": "deploy", "selected": ["<!channel> & <@U123> yes"]},
            {"id": "name", "selected": ["<!here> no"]},
        ]
        await slack.clicks.submit(request, SlackUser("UALICE", "alice"), message.channel, answers)
        ephemeral = (await standin.wait_for("chat.postEphemeral"))[0]
        assert ephemeral["text"].startswith("Your answer was not accepted: ")
        assert "&lt;!channel&gt; &amp; &lt;@U123&gt; yes" in ephemeral["text"]
        assert "&lt;!here&gt; no" in ephemeral["text"]
        assert agent_markup(standin) == []
        assert not task.done()  # nothing recorded
        task.cancel()


async def test_a_long_question_is_posted_whole(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """2,000 characters of `&` (10,000 escaped): posted, in four sections, all of it."""
    long = {**SEED["questions"][0], "question": "&" * 2000}
    async with slack_worker(backend, standin) as slack:
        task = asking(seam, [long])
        message = await standin.message()
        texts = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
        assert "".join(texts[:4]) == "&amp;" * 2000
        await click(slack, block_actions(message, ALICE, "askq.pick.0"))
        assert await answered(task) == YES_JSON
        update = (await standin.wait_for("chat.update"))[0]
        assert update["text"].startswith("✅ *Answered* by <@UALICE> — Confirm: &amp;&amp;")
        assert "&amp;" * 2000 in "".join(
            b["text"]["text"] for b in update["blocks"] if b["type"] == "section"
        )
