"""Two Slack groups side by side on one Redis and one Slack app (issue 22, item 1): each
posts, updates and answers its own message; neither reads the other's records, and a
click on one group's message that reaches the other is refused, recording nothing.
Against fakeredis and the real Redis, with the Slack stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from conftest import NO_JSON, SEED, YES_JSON, Backend, running, sweeping
from slack_standin import (
    ALICE,
    Message,
    SlackStandIn,
    block_actions,
    post_interaction,
    slack_settings,
    standin,
)

from askq import Answers, Caller, RequestState, Seam
from askq.answerers.slack import SlackAnswerer

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
TEAM, MGR = "C0TEAM", "C0MGR"


@contextlib.asynccontextmanager
async def slack_group(
    backend: Backend,
    standin: SlackStandIn,
    group: str,
    priority: int,
    channel: str,
    **timing: float,
) -> AsyncIterator[SlackAnswerer]:
    routes = json.dumps({"*": {"channel": channel, "allow": ["UALICE", "UBOB"]}})
    async with backend.seam() as worker_seam:
        answerer = SlackAnswerer(settings=slack_settings(standin, routes=routes))
        async with running(worker_seam, answerer, group, priority, **timing):
            yield answerer


async def posted_to(standin: SlackStandIn, channel: str) -> Message:
    """The question message posted to `channel`, once it is."""
    async with asyncio.timeout(15):
        while True:
            for call in standin.calls:
                if call.method == "chat.postMessage" and call.args.get("channel") == channel:
                    if call.response.get("ok") and "thread_ts" not in call.args:
                        return Message(
                            call.response["channel"], call.response["ts"], call.args["blocks"]
                        )
            await standin.wait_for(
                "chat.postMessage", len(standin.calls_to("chat.postMessage")) + 1, 15
            )


async def updates_of(
    standin: SlackStandIn, message: Message, count: int = 1
) -> list[dict[str, Any]]:
    async with asyncio.timeout(15):
        while True:
            found = [
                u
                for u in standin.calls_to("chat.update")
                if (u["channel"], u["ts"]) == (message.channel, message.ts)
            ]
            if len(found) >= count:
                return found
            await standin.wait_for("chat.update", len(standin.calls_to("chat.update")) + 1, 15)


async def ephemerals(standin: SlackStandIn, count: int) -> list[dict[str, Any]]:
    return (await standin.wait_for("chat.postEphemeral", count))[:count]


async def click(slack: SlackAnswerer, payload: dict[str, Any]) -> None:
    assert slack.http_port is not None
    assert await post_interaction(slack.http_port, payload) == (200, "")


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


async def test_an_escalation_posts_the_next_groups_own_message(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """`slack-team` (tier 30, escalates after a second) passes the question on to
    `slack-mgr` (tier 40), which posts its own message and takes the answer (before:
    slack-mgr read slack-team's record, found it posted, and never posted; nobody
    could answer). The team's message says it was escalated, and a click on it after
    that is refused."""
    async with (
        sweeping(backend),
        slack_group(backend, standin, "slack-team", 30, TEAM, escalate_after=1.0) as team,
        slack_group(backend, standin, "slack-mgr", 40, MGR) as mgr,
    ):
        task: asyncio.Task[Answers] = asyncio.create_task(seam.ask(SEED, CALLER))
        first = await posted_to(standin, TEAM)
        second = await posted_to(standin, MGR)
        assert (first.group, second.group) == ("slack-team", "slack-mgr")
        assert first.request_id == second.request_id
        (escalated,) = await updates_of(standin, first)
        assert "Escalated" in json.dumps(escalated["blocks"])
        await click(team, block_actions(first, ALICE, "askq.pick.1"))
        (told,) = await ephemerals(standin, 1)
        assert told["user"] == "UALICE"
        assert (
            told["text"]
            == "This question was passed on to other people: nothing was recorded here."
        )
        assert await state_of(seam, first.request_id) is RequestState.CLAIMED
        await click(mgr, block_actions(second, ALICE, "askq.pick.0"))
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        (answered,) = await updates_of(standin, second)
        assert "Answered" in json.dumps(answered["blocks"])
        await standin.settle(0.3)
        assert len(await updates_of(standin, first)) == 1  # its escalation, nothing after


async def test_two_groups_in_one_tier_each_post_and_update_their_own_message(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    """Both groups hold the question: each posts its own message (before: the second
    found the first's record and posted nothing). A click on the team's message that
    Slack delivers to the other group (one app, two groups) is refused with a word to
    the clicker and records nothing; at its own group it answers. Each message is then
    updated in place, the team's as answered, the other's as answered elsewhere."""
    async with (
        slack_group(backend, standin, "slack-team", 0, TEAM) as team,
        slack_group(backend, standin, "slack-mgr", 0, MGR) as mgr,
    ):
        task: asyncio.Task[Answers] = asyncio.create_task(seam.ask(SEED, CALLER))
        ours = await posted_to(standin, TEAM)
        theirs = await posted_to(standin, MGR)
        await click(mgr, block_actions(ours, ALICE, "askq.pick.1"))  # the team's message
        (told,) = await ephemerals(standin, 1)
        assert told["user"] == "UALICE"
        assert "nothing was recorded" in told["text"]
        assert "each askq Slack group needs a Slack app of its own" in told["text"]
        await standin.settle(0.3)
        assert standin.calls_to("chat.update") == []
        assert await state_of(seam, ours.request_id) is RequestState.CLAIMED
        await click(team, block_actions(ours, ALICE, "askq.pick.1"))
        assert (await asyncio.wait_for(task, 10)).to_json() == NO_JSON
        (answered,) = await updates_of(standin, ours)
        (elsewhere,) = await updates_of(standin, theirs)
        assert "Answered* by <@UALICE>" in json.dumps(answered["blocks"])
        assert "Answered" in json.dumps(elsewhere["blocks"])  # its own card, in place
