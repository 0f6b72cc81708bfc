"""Two Teams groups side by side on one Redis, each with a bot of its own (as Teams
gives each bot registration one messaging endpoint): each posts, updates and answers
its own card; neither reads the other's records; a click on one group's card that
reaches the other is refused, recording nothing. And a replica that dies mid-send:
another replica of its group posts the card. Against fakeredis and the real Redis,
with the Teams stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import SEED, YES_JSON, Backend, running, sweeping
from teams_standin import (
    ALICE,
    APP_ID,
    APP_ID_2,
    APP_PASSWORD_2,
    CHANNEL,
    OTHER_CHANNEL,
    TeamsStandIn,
    actions,
    click,
    shown,
    standin,
    teams_settings,
)

from askq import Caller, RequestState, Seam
from askq.answerers.teams import TeamsAnswerer

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
BOTS = {"teams-team": (APP_ID, "standin-client-secret"), "teams-mgr": (APP_ID_2, APP_PASSWORD_2)}


@contextlib.asynccontextmanager
async def teams_group(
    backend: Backend,
    standin: TeamsStandIn,
    group: str,
    priority: int,
    conversation: str,
    **timing: float,
) -> AsyncIterator[TeamsAnswerer]:
    app_id, password = BOTS[group]
    routes = json.dumps({"*": {"conversation": conversation, "allow": [ALICE.object_id]}})
    settings = teams_settings(standin, app_id=app_id, app_password=password, routes=routes)
    async with backend.seam() as worker_seam:
        answerer = TeamsAnswerer(settings=settings)
        async with running(worker_seam, answerer, group, priority, **timing):
            yield answerer


async def posted_to(standin: TeamsStandIn, conversation: str) -> Any:
    async with asyncio.timeout(15):
        n = 1
        while True:
            posted = await standin.card(n)
            if posted.conversation == conversation:
                return posted
            n += 1


def as_bot(standin: TeamsStandIn, body: dict[str, Any], app_id: str) -> tuple[dict[str, Any], str]:
    """The activity as the Bot Connector sends it to `app_id`'s endpoint."""
    body = {**body, "recipient": {"id": f"28:{app_id}", "name": "askq"}}
    return body, standin.token_for(body["serviceUrl"], audience=app_id)


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


async def test_an_escalation_posts_the_next_groups_own_card(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """`teams-team` (tier 30) escalates to `teams-mgr` (tier 40), whose bot posts its
    own card; the team's card says it was escalated and a click on it afterwards is
    told so; the manager's click answers; each bot's calls carry its own token."""
    async with (
        sweeping(backend),
        teams_group(backend, standin, "teams-team", 30, CHANNEL, escalate_after=1.0) as team,
        teams_group(backend, standin, "teams-mgr", 40, OTHER_CHANNEL) as mgr,
    ):
        assert team.http_port is not None and mgr.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        first = await posted_to(standin, CHANNEL)
        second = await posted_to(standin, OTHER_CHANNEL)
        assert (first.group, second.group) == ("teams-team", "teams-mgr")
        assert first.request_id == second.request_id
        creates = {
            c.conversation: standin.token_apps[str(c.token)] for c in standin.calls_to("create")
        }
        assert creates == {CHANNEL: APP_ID, OTHER_CHANNEL: APP_ID_2}
        await standin.wait_for("update")
        assert "Escalated" in shown(standin.updates_of(first)[0])
        _, body = await standin.send(
            team.http_port, click(standin, first, ALICE, first.button("Yes"))
        )
        assert shown(body["value"]).startswith("This question was passed on to other people")
        assert await state_of(seam, first.request_id) is RequestState.CLAIMED
        activity, token = as_bot(
            standin, click(standin, second, ALICE, second.button("Yes")), APP_ID_2
        )
        status, body = await standin.send(mgr.http_port, activity, token=token)
        assert status == 200 and "Answered by Alice Adams" in shown(body["value"])
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("update", 2)
        assert "Answered by Alice Adams" in shown(standin.updates_of(second)[0])
        await standin.settle()
        assert len(standin.updates_of(first)) == 1  # its escalation, nothing after
    keys = backend.keys()
    assert any(":teams:teams-team:msg:" in k for k in keys)
    assert any(":teams:teams-mgr:msg:" in k for k in keys)


async def test_two_groups_in_one_tier_each_post_and_answer_their_own_card(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """Both groups hold the question and each posts its own card. The team's card's
    click delivered to the manager's bot (signed for it) is refused with a word to the
    clicker and records nothing; at its own bot it answers. Each card is then edited:
    the team's "Answered by Alice Adams", the manager's "Answered in Teams by ..."."""
    async with (
        teams_group(backend, standin, "teams-team", 0, CHANNEL) as team,
        teams_group(backend, standin, "teams-mgr", 0, OTHER_CHANNEL) as mgr,
    ):
        assert team.http_port is not None and mgr.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        first = await posted_to(standin, CHANNEL)
        second = await posted_to(standin, OTHER_CHANNEL)
        wrong, token = as_bot(standin, click(standin, first, ALICE, first.button("Yes")), APP_ID_2)
        status, body = await standin.send(mgr.http_port, wrong, token=token)
        assert status == 200 and body["type"] == "application/vnd.microsoft.activity.message"
        assert "each askq Teams group needs a bot of its own" in body["value"]
        # The team's own token at the manager's endpoint is another audience: refused.
        status, _ = await standin.send(
            mgr.http_port, click(standin, first, ALICE, first.button("Yes"))
        )
        assert status == 401
        assert await state_of(seam, first.request_id) is RequestState.CLAIMED
        status, body = await standin.send(
            team.http_port, click(standin, first, ALICE, first.button("Yes"))
        )
        assert "✅ Answered by Alice Adams" in shown(body["value"])
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("update", 2)
        assert "✅ Answered by Alice Adams" in shown(standin.updates_of(first)[0])
        assert "✅ Answered in Teams by Alice Adams" in shown(standin.updates_of(second)[0])
        assert actions(standin.updates_of(second)[0]) == []


async def test_a_replica_killed_mid_send_leaves_the_post_to_another(
    backend: Backend, seam: Seam, standin: TeamsStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A claims the question; its post hangs at Teams; A dies (its task is
    cancelled, and as a killed process would, it never drops its post lease). Replica
    B of the same group takes the claim over, waits out the lease (2 s here), and
    posts the card: exactly one card reaches Teams, and a click on it answers."""
    monkeypatch.setattr("askq.answerers.teams._state.POST_LEASE_SECONDS", 2)
    held = standin.hold_next("create")
    async with backend.seam() as b_seam:
        b = TeamsAnswerer(settings=teams_settings(standin))
        a = TeamsAnswerer(settings=teams_settings(standin))
        async with backend.seam() as a_seam:
            a_run = running(a_seam, a, "teams", consumer="a")
            await a_run.__aenter__()
            task = asyncio.create_task(seam.ask(SEED, CALLER))
            await asyncio.wait_for(held.reached.wait(), 15)  # A's post is at Teams

            async def keep(name: str) -> None:  # a dead process drops no lease
                return None

            monkeypatch.setattr(a.group.store, "drop_lease", keep)
            await a_run.__aexit__(None, None, None)
        held.release.set()  # A's post: its client is gone, so nothing is created
        async with running(b_seam, b, "teams", consumer="b"):
            posted = await standin.card(timeout=30)
            assert b.http_port is not None
            await standin.send(b.http_port, click(standin, posted, ALICE, posted.button("Yes")))
            assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
            await standin.settle(0.5)
    assert [c.status for c in standin.calls if c.op == "create"] == [499, 200]
