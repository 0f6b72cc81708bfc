"""Two Discord groups side by side on one Redis, each with an application of its own (as
Discord gives each application one interactions endpoint): each posts, edits and
answers its own message; neither reads the other's records; an interaction on one
group's message that reaches the other is refused, recording nothing. A question
answered in another channel, an escalation, and a replica that dies mid-send: another
replica of its group posts the message. Against fakeredis and the real Redis, with the
Discord stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import SEED, YES_JSON, Backend, running, sweeping
from discord_standin import (
    ALICE,
    APP,
    APP_2,
    CHANNEL,
    OTHER_CHANNEL,
    Application,
    DiscordStandIn,
    Posted,
    click,
    discord_settings,
    standin,
)

from askq import Caller, RequestState, Seam
from askq.answerers.discord import DiscordAnswerer
from askq.answerers.memory import MemoryAnswerer

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
APPS = {"discord-team": APP, "discord-mgr": APP_2}
DEFERRED = {"type": 6}


@contextlib.asynccontextmanager
async def discord_group(
    backend: Backend,
    standin: DiscordStandIn,
    group: str,
    priority: int,
    channel: str,
    **timing: float,
) -> AsyncIterator[DiscordAnswerer]:
    routes = json.dumps({"*": {"channel": channel, "allow": [ALICE.id]}})
    settings = discord_settings(standin, APPS[group], routes=routes)
    async with backend.seam() as worker_seam:
        answerer = DiscordAnswerer(settings=settings)
        async with running(worker_seam, answerer, group, priority, **timing):
            yield answerer


async def posted_to(standin: DiscordStandIn, channel: str) -> Posted:
    async with asyncio.timeout(15):
        n = 1
        while True:
            posted = await standin.message(n)
            if posted.channel == channel:
                return posted
            n += 1


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


def port(answerer: DiscordAnswerer) -> int:
    assert answerer.http_port is not None
    return answerer.http_port


def said(body: Any) -> str:
    assert body["type"] == 4 and body["data"]["flags"] == 64, body
    return str(body["data"]["content"])


async def test_an_escalation_posts_the_next_groups_own_message(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """`discord-team` (tier 30) escalates to `discord-mgr` (tier 40), whose bot posts its
    own message; the team's message says it was escalated (a reply notes it) and a
    click on it afterwards is told so; the manager's click answers; each bot's calls
    carry its own token."""
    async with (
        sweeping(backend),
        discord_group(backend, standin, "discord-team", 30, CHANNEL, escalate_after=1.0) as team,
        discord_group(backend, standin, "discord-mgr", 40, OTHER_CHANNEL) as mgr,
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        first = await posted_to(standin, CHANNEL)
        second = await posted_to(standin, OTHER_CHANNEL)
        assert first.request_id == second.request_id
        tokens = {c.channel: c.token for c in standin.calls_to("post")}
        assert tokens == {CHANNEL: APP.token, OTHER_CHANNEL: APP_2.token}
        await standin.wait_for("edit")
        [escalated] = standin.edits_of(first)
        assert escalated["content"].startswith("⤴️ **Escalated** to another answerer")
        [note] = await standin.wait_for("reply")
        assert note.channel == CHANNEL and note.token == APP.token
        _, body = await standin.send(port(team), click(first, ALICE, first.button("Yes")))
        assert said(body).startswith("This question was passed on to other people")
        assert await state_of(seam, first.request_id) is RequestState.CLAIMED
        clicked = click(second, ALICE, second.button("Yes"), app=APP_2)
        status, body = await standin.send(port(mgr), clicked, app=APP_2)
        assert (status, body) == (200, DEFERRED)
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("edit", 2)
        assert standin.edits_of(second)[0]["content"].startswith("✅ **Answered** by Alice")
        await standin.settle()
        assert len(standin.edits_of(first)) == 1  # its escalation, nothing after
    keys = backend.keys()
    assert any(":discord:discord-team:msg:" in k for k in keys)
    assert any(":discord:discord-mgr:msg:" in k for k in keys)


async def test_two_groups_in_one_tier_each_post_and_answer_their_own_message(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """Both groups hold the question and each posts its own message. The team's
    message's click delivered to the manager's endpoint (signed by its application, as
    if both groups shared one) is refused with a word to the clicker and records
    nothing; signed by the team's application it is refused 401 there; at the team's
    own endpoint it answers. Each message is then edited: the team's "Answered by
    Alice", the manager's "Answered in Discord by Alice"."""
    async with (
        discord_group(backend, standin, "discord-team", 0, CHANNEL) as team,
        discord_group(backend, standin, "discord-mgr", 0, OTHER_CHANNEL) as mgr,
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        first = await posted_to(standin, CHANNEL)
        await posted_to(standin, OTHER_CHANNEL)
        wrong = click(first, ALICE, first.button("Yes"), app=APP_2)
        status, body = await standin.send(port(mgr), wrong, app=APP_2)
        assert status == 200
        assert "each askq Discord group needs an application of its own" in said(body)
        status, _ = await standin.send(port(mgr), click(first, ALICE, first.button("Yes")))
        assert status == 401
        await standin.settle()
        assert await state_of(seam, first.request_id) is RequestState.CLAIMED
        assert standin.calls_to("edit") == []
        status, body = await standin.send(port(team), click(first, ALICE, first.button("Yes")))
        assert body == DEFERRED
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("edit", 2)
        edits = {c.channel: c.body["content"] for c in standin.calls_to("edit")}
        assert edits[CHANNEL].startswith("✅ **Answered** by Alice")
        assert edits[OTHER_CHANNEL].startswith("✅ **Answered** in Discord by Alice")
        assert {c.channel: c.token for c in standin.calls_to("edit")} == {
            CHANNEL: APP.token,
            OTHER_CHANNEL: APP_2.token,
        }


async def test_answered_elsewhere_edits_the_message_and_notes_it(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """Another channel of the tier answers first: the Discord message says so in place
    (Slack's words), a reply notes it, and a click afterwards is told who answered."""
    human = MemoryAnswerer(by="web:carol")
    async with (
        discord_group(backend, standin, "discord-team", 0, CHANNEL) as team,
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 0),
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await posted_to(standin, CHANNEL)
        offer = await human.next_presented(timeout=10)
        await human.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()
        [edit] = await standin.wait_for("edit")
        assert edit.body["content"].startswith(
            "✅ **Answered** in the web inbox by carol\n**Confirm**"
        )
        assert "→ **No, keep them**" in edit.body["content"]
        assert edit.body["components"] == []
        [note] = await standin.wait_for("reply")
        assert note.body["content"] == "✅ **Answered** in the web inbox by carol"
        _, body = await standin.send(port(team), click(posted, ALICE, posted.button("Yes")))
        assert said(body) == "Already answered in the web inbox by carol. Nothing was recorded."
        await standin.settle()
        assert len(standin.calls_to("edit")) == 1 and len(standin.calls_to("reply")) == 1


async def test_a_replica_killed_mid_send_leaves_the_post_to_another(
    backend: Backend, seam: Seam, standin: DiscordStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A claims the question; its post hangs at Discord; A dies (its task is
    cancelled, and as a killed process would, it never drops its post lease). Replica
    B of the same group takes the claim over, waits out the lease (2 s here), and
    posts the message: exactly one reaches Discord, and a click on it answers."""
    monkeypatch.setattr("askq.answerers.discord._state.POST_LEASE_SECONDS", 2)
    held = standin.hold_next("post")
    app: Application = APP
    async with backend.seam() as b_seam:
        b = DiscordAnswerer(settings=discord_settings(standin, app))
        a = DiscordAnswerer(settings=discord_settings(standin, app))
        async with backend.seam() as a_seam:
            a_run = running(a_seam, a, "discord", consumer="a")
            await a_run.__aenter__()
            task = asyncio.create_task(seam.ask(SEED, CALLER))
            await asyncio.wait_for(held.reached.wait(), 15)  # A's post is at Discord

            async def keep(name: str) -> None:  # a dead process drops no lease
                return None

            monkeypatch.setattr(a.group.store, "drop_lease", keep)
            await a_run.__aexit__(None, None, None)
        held.release.set()  # A's post: its client is gone, so nothing is created
        async with running(b_seam, b, "discord", consumer="b"):
            posted = await standin.message(timeout=30)
            await standin.send(port(b), click(posted, ALICE, posted.button("Yes")))
            assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
            await standin.settle(0.5)
    assert [c.status for c in standin.calls if c.op == "post"] == [499, 200]
