"""The Teams answerer against a stand-in of Microsoft's side (tests/teams_standin.py):
the bot's token from the authority, cards posted, updated and replied to through the
Bot Connector API, clicks POSTed to the messaging endpoint signed with the stand-in's
keys. Against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from conftest import SEED, YES_JSON, Backend, running
from teams_standin import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    MALLORY,
    OTHER_TENANT,
    TeamsStandIn,
    actions,
    card_of,
    click,
    inputs,
    installed,
    refresh,
    shown,
    standin,
    teams_settings,
    texts,
)

from askq import Caller, RequestState, Seam
from askq.answerers.teams import TeamsAnswerer

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
OTHER_APP = "0a1b2c3d-0000-4000-8000-0000000000ff"


@contextlib.asynccontextmanager
async def teams_worker(
    backend: Backend, standin: TeamsStandIn, group: str = "teams", priority: int = 0, **extra: Any
) -> AsyncIterator[TeamsAnswerer]:
    timing = {k: extra.pop(k) for k in ("escalate_after", "remind_after") if k in extra}
    async with backend.seam() as worker_seam:
        answerer = TeamsAnswerer(settings=teams_settings(standin, **extra))
        async with running(worker_seam, answerer, group, priority, **timing):
            yield answerer


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


async def test_a_question_is_a_card_and_a_click_answers_it(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """The card is posted to the route's channel with the bot's token; Alice's click on
    the recommended option answers, the caller gets the exact JSON, Alice gets the
    final card back at once, and the card is edited in place for everyone."""
    async with teams_worker(backend, standin) as teams:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card()
        assert posted.conversation == CHANNEL
        [post] = standin.calls_to("create")
        assert post.token in standin.tokens_issued
        assert post.body["summary"] == "Confirm: Proceed with the destructive cleanup?"
        assert posted.card["version"] == "1.5"
        titles = [a["title"] for a in actions(posted.card)]
        assert titles == ["Yes, delete them (Recommended)", "No, keep them", "Send my answer"]
        assert [i["type"] for i in inputs(posted.card)] == ["Input.Text"]
        assert teams.http_port is not None
        status, body = await standin.send(
            teams.http_port, click(standin, posted, ALICE, posted.button("Yes"))
        )
        assert status == 200
        assert body["statusCode"] == 200
        assert body["type"] == "application/vnd.microsoft.card.adaptive"
        assert "✅ Answered by Alice Adams" in shown(body["value"])
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("update")
        [final] = standin.updates_of(posted)
        assert "✅ Answered by Alice Adams" in shown(final)
        assert "→ Yes, delete them (Recommended)" in shown(final)
        assert actions(final) == [] and inputs(final) == [] and "refresh" not in final


async def test_forged_expired_and_misdirected_tokens_are_refused(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """Each click below is refused 401 (403 for a tenant not allowed) and records
    nothing: no token, not a JWT, signed by a key not published, by a key not endorsed
    for msteams, another audience, another issuer, expired beyond the five minutes of
    skew, a serviceUrl other than the token's, a symmetric algorithm. The genuine click
    after them answers."""
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card()
        good = click(standin, posted, ALICE, posted.button("Yes"))
        url = good["serviceUrl"]
        hour_ago = time.time() - 3600
        refused = {
            "no token": "",
            "not a JWT": "Bearer not-a-jwt",
            "not Bearer": "Basic " + standin.token_for(url),
            "unpublished key": "Bearer " + standin.token_for(url, key=standin.stranger),
            "unendorsed key": "Bearer " + standin.token_for(url, key=standin.unendorsed),
            "other audience": "Bearer " + standin.token_for(url, audience=OTHER_APP),
            "other issuer": "Bearer " + standin.token_for(url, issuer="https://evil.example"),
            "expired": "Bearer " + standin.token_for(url, issued=hour_ago - 400, lifetime=3600),
            "not yet valid": "Bearer " + standin.token_for(url, issued=time.time() + 900),
            "other service": "Bearer " + standin.token_for("https://evil.example/amer/"),
            "HS256": "Bearer " + standin.token_for(url, alg="HS256"),
        }
        for why, authorization in refused.items():
            status, _ = await standin.send(teams.http_port, good, authorization=authorization)
            assert status == 401, why
        foreign = click(standin, posted, ALICE, posted.button("Yes"))
        foreign["conversation"]["tenantId"] = OTHER_TENANT
        foreign["channelData"]["tenant"]["id"] = OTHER_TENANT
        assert (await standin.send(teams.http_port, foreign))[0] == 403
        assert await state_of(seam, posted.request_id) is RequestState.CLAIMED
        assert standin.calls_to("update") == []
        # Within the skew: a token issued four minutes ahead of this clock is taken.
        early = standin.token_for(url, issued=time.time() + 240)
        status, body = await standin.send(teams.http_port, good, token=early)
        assert status == 200 and "Answered by Alice Adams" in shown(body["value"])
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON


async def test_a_late_click_is_told_who_answered_and_changes_nothing(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """On the acme route Bob may answer by his UPN (read once from the roster); after
    Alice answered, his click gets the answered card with a notice that names her,
    only he sees it, and nothing changes. Mallory, not listed, is told so."""
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "acme"}))
        posted = await standin.card()
        status, body = await standin.send(
            teams.http_port, click(standin, posted, MALLORY, posted.button("No"))
        )
        assert status == 200
        assert shown(body["value"]).startswith(
            "You are not on the list of people who may answer this question."
        )
        assert actions(body["value"])  # still the question, for her to see
        await standin.send(teams.http_port, click(standin, posted, ALICE, posted.button("Yes")))
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        status, body = await standin.send(
            teams.http_port, click(standin, posted, BOB, posted.button("No"))
        )
        assert status == 200
        late = shown(body["value"])
        told = "Already answered in Teams by Alice Adams. Nothing was recorded."
        assert late.startswith(f"{told}\n✅ Answered by Alice Adams"), late
        assert actions(body["value"]) == []
        assert [c.conversation for c in standin.calls_to("member")] == [CHANNEL, CHANNEL]
        await standin.settle()
        assert len(standin.calls_to("update")) == 1
        settlement = await seam.request_status(posted.request_id)
        assert settlement is not None and settlement.state is RequestState.ANSWERED


LANGS = {
    "id": "langs",
    "header": "Languages",
    "question": "Which languages should the linter cover?",
    "multiSelect": True,
    "options": [
        {"label": "Python (Recommended)", "description": "The main code base."},
        {"label": "Go", "description": "The CLI."},
        {"label": "Rust (Recommended)", "description": "The hot path."},
    ],
}
WHY = {"id": "why", "header": "Reason", "question": "Why now?"}


async def test_a_form_of_choices_and_text_is_submitted_as_one(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """Two questions (a multi-select, a free-text one): checkboxes, text inputs and one
    Submit. Submitted without the free text, the clicker gets the card back, their
    choices kept, asked for it; with it, both are answered as one."""
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask({"questions": [LANGS, WHY]}, CALLER))
        posted = await standin.card()
        [choices, other, reason] = inputs(posted.card)
        assert choices["type"] == "Input.ChoiceSet" and choices["isMultiSelect"] is True
        assert choices["style"] == "expanded"
        assert [c["title"] for c in choices["choices"]] == [o["label"] for o in LANGS["options"]]
        assert (other["id"], reason["id"]) == ("c0", "c1")
        assert "• Go — The CLI." in shown(posted.card)
        assert [a["title"] for a in actions(posted.card)] == ["Submit"]
        submit = posted.button("Submit")
        status, body = await standin.send(
            teams.http_port, click(standin, posted, ALICE, submit, {"q0": "0,2", "c1": " "})
        )
        assert status == 200
        assert shown(body["value"]).startswith("Please answer first: Reason")
        assert inputs(body["value"])[0]["value"] == "0,2"
        assert await state_of(seam, posted.request_id) is RequestState.CLAIMED
        given = {"q0": "2,0", "c0": "", "c1": "the release is on Friday"}
        status, body = await standin.send(
            teams.http_port, click(standin, posted, ALICE, submit, given)
        )
        assert "✅ Answered by Alice Adams" in shown(body["value"])
        answers = json.loads((await asyncio.wait_for(task, 10)).to_json())["answers"]
        assert answers == [
            {"id": "langs", "selected": ["Python (Recommended)", "Rust (Recommended)"]},
            {"id": "why", "selected": [], "custom": "the release is on Friday"},
        ]


async def test_a_custom_answer_beside_the_buttons(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """On a one-click card, the text typed beside the buttons is the answer when
    "Send my answer" is pressed (a custom answer overrides a choice)."""
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card()
        send = posted.button("Send my answer")
        await standin.send(
            teams.http_port, click(standin, posted, ALICE, send, {"c0": "only the logs"})
        )
        answers = json.loads((await asyncio.wait_for(task, 10)).to_json())["answers"]
        assert answers == [{"id": "cleanup", "selected": [], "custom": "only the logs"}]
        await standin.wait_for("update")
        assert "→ “only the logs”" in shown(standin.updates_of(posted)[0])


async def test_escalation_updates_the_card_and_notes_it_in_the_thread(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """The question escalates away from the group to the next tier: its card says so in
    Slack's words, a note in the card's thread tells the people following it, a
    refresh shows the same, and a late click is told it was passed on."""
    from conftest import sweeping

    from askq.answerers.memory import MemoryAnswerer

    human = MemoryAnswerer()
    async with (
        sweeping(backend),
        teams_worker(backend, standin, priority=10, escalate_after=1.0) as teams,
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 20),
    ):
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card()
        await standin.wait_for("update", timeout=15)
        [escalated] = standin.updates_of(posted)
        assert "⤴️ Escalated to another answerer" in shown(escalated)
        [note] = await standin.wait_for("reply")
        assert note.conversation == f"{CHANNEL};messageid={posted.activity_id}"
        assert shown(card_of(note.body)) == "⤴️ Escalated to another answerer"
        status, body = await standin.send(teams.http_port, refresh(standin, posted, BOB))
        assert "⤴️ Escalated to another answerer" in shown(body["value"])
        status, body = await standin.send(
            teams.http_port, click(standin, posted, ALICE, posted.button("Yes"))
        )
        assert shown(body["value"]).startswith(
            "This question was passed on to other people: nothing was recorded here."
        )
        offer = await human.next_presented(timeout=10)
        await human.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()
        await standin.settle()
        assert len(standin.updates_of(posted)) == 1  # escalated; nothing after


async def test_a_withdrawn_question_says_why_and_a_refresh_shows_it(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """The agent's turn is aborted: the card becomes "Cancelled (the turn was
    aborted)" in place, noted in the thread once; before that a refresh showed the
    question, after it the cancelled card."""
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card()
        status, body = await standin.send(teams.http_port, refresh(standin, posted, BOB))
        assert status == 200 and actions(body["value"]) and "refresh" in body["value"]
        await seam.abort_turn(CALLER.turn_id)
        await standin.wait_for("update")
        [cancelled] = standin.updates_of(posted)
        assert shown(cancelled).startswith("🚫 Cancelled (the turn was aborted)")
        await standin.wait_for("reply")
        status, body = await standin.send(teams.http_port, refresh(standin, posted, BOB))
        assert shown(body["value"]).startswith("🚫 Cancelled")
        assert actions(body["value"]) == []
        await standin.settle()
        assert len(standin.calls_to("update")) == 1 and len(standin.calls_to("reply")) == 1
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


async def test_a_reminder_goes_to_the_thread_once(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    from conftest import sweeping

    async with sweeping(backend), teams_worker(backend, standin, remind_after=0.5) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card()
        [reminder] = await standin.wait_for("reply")
        assert reminder.conversation == f"{CHANNEL};messageid={posted.activity_id}"
        assert shown(card_of(reminder.body)) == "⏰ Still waiting for an answer to this question."
        await standin.send(teams.http_port, click(standin, posted, ALICE, posted.button("No")))
        await asyncio.wait_for(task, 10)
        await standin.settle(0.5)
        assert len(standin.calls_to("reply")) == 1  # no note: it was answered on the card


async def test_a_personal_route_posts_where_the_app_was_installed(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """Carol installs the app (personal scope): the installation is recorded, and her
    route's question goes to that chat; she may answer it (the route's own user)."""
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        personal = f"a:personal-{CAROL.id}"
        install = installed(standin, CAROL, conversation=personal, conversation_type="personal")
        assert (await standin.send(teams.http_port, install))[0] == 200
        task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "dm"}))
        posted = await standin.card()
        assert posted.conversation == personal
        assert standin.calls_to("create_conversation") == []
        await standin.send(teams.http_port, click(standin, posted, CAROL, posted.button("No")))
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()


async def test_a_person_without_the_app_is_released_to_the_next_tier(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """No installation recorded for Carol, and Teams refuses to open a chat with her
    (the app is not installed for her): the question is given back, and the next tier
    answers it."""
    from askq.answerers.memory import MemoryAnswerer

    human = MemoryAnswerer()
    async with teams_worker(backend, standin, priority=10), backend.seam() as s2:
        async with running(s2, human, "desk", 20):
            task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "dm"}))
            offer = await human.next_presented(timeout=15)
            [attempt] = [c for c in standin.calls if c.op == "create_conversation"]
            assert attempt.status == 403
            assert attempt.body["members"] == [{"id": CAROL.object_id}]
            await human.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
            assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()
    assert standin.calls_to("create") == []


async def test_a_rate_limited_post_is_retried_after_retry_after(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    standin.fail_next("create", status=429, retry_after=1)
    async with teams_worker(backend, standin):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.card(timeout=15)
        refused = [c for c in standin.calls if c.op == "create" and c.status == 429]
        assert len(refused) == 1 and len(standin.calls_to("create")) == 1
        assert posted.conversation == CHANNEL
        task.cancel()


HOSTILE = (
    "**bold** _it_ [click](https://evil.example) <at>everyone</at> {{DATE(2017-02-14T06:00:00Z)}}"
)


async def test_agent_text_reaches_teams_only_as_plain_runs(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """Markdown, a mention tag and a date function in every agent text (header,
    question, labels, descriptions, ids) reach Teams only as TextRun texts, button and
    choice titles (none of which Teams reads as Markdown), with the date function
    defused; no TextBlock (Markdown) and no mention entity anywhere; the answer's text
    shown on the final card the same way."""
    question = {
        "id": "q1",
        "header": "<at>all</at> **H**",
        "question": HOSTILE + "\nline two",
        "options": [
            {"label": "**A** <at>x</at>", "description": HOSTILE},
            {"label": "[b](https://evil.example)"},
        ],
    }
    hostile_caller = Caller(agent_id="**agent** <at>y</at>", turn_id="[t](https://evil.example)")
    async with teams_worker(backend, standin) as teams:
        assert teams.http_port is not None
        task = asyncio.create_task(seam.ask({"questions": [question]}, hostile_caller))
        posted = await standin.card()
        dumped = json.dumps(posted.card)
        assert '"TextBlock"' not in dumped and '"FactSet"' not in dumped
        [post] = standin.calls_to("create")
        assert "entities" not in post.body
        runs = texts(posted.card)
        assert "**bold** _it_ [click](https://evil.example) <at>everyone</at> {\u200b{DATE(" in (
            "".join(runs)
        )
        assert "{{" not in "".join(runs)
        assert "line two" in runs
        assert [a["title"] for a in actions(posted.card)][:2] == [
            "**A** <at>x</at>",
            "[b](https://evil.example)",
        ]
        send = posted.button("Send my answer")
        await standin.send(teams.http_port, click(standin, posted, ALICE, send, {"c0": HOSTILE}))
        await asyncio.wait_for(task, 10)
        await standin.wait_for("update")
        [final] = standin.updates_of(posted)
        assert '"TextBlock"' not in json.dumps(final)
        assert "“**bold** _it_ [click](https://evil.example) <at>everyone</at> {\u200b{DATE(" in (
            "".join(texts(final))
        )


async def test_an_uninstalled_app_forgets_the_conversation(
    backend: Backend, seam: Seam, standin: TeamsStandIn
) -> None:
    """Carol installs the app, then removes it: her chat's reference is dropped, so her
    route's question asks Teams for a chat (refused: not installed) instead of posting
    into the old one, and goes to the next tier."""
    from askq.answerers.memory import MemoryAnswerer

    human = MemoryAnswerer()
    personal = f"a:personal-{CAROL.id}"
    async with teams_worker(backend, standin, priority=10) as teams, backend.seam() as s2:
        assert teams.http_port is not None
        for action in ("add", "remove"):
            body = installed(
                standin, CAROL, conversation=personal, conversation_type="personal", action=action
            )
            assert (await standin.send(teams.http_port, body))[0] == 200
        async with running(s2, human, "desk", 20):
            task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "dm"}))
            offer = await human.next_presented(timeout=15)
            await human.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
            await asyncio.wait_for(task, 10)
    assert [c.status for c in standin.calls if c.op == "create_conversation"] == [403]
    assert standin.calls_to("create") == []
