"""The Discord answerer against a stand-in of Discord (tests/discord_standin.py): questions
posted and edited through the REST API, interactions POSTed to the endpoint signed
with an Ed25519 key made for the test. Against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from conftest import SEED, YES_JSON, Backend, running
from discord_standin import (
    ALICE,
    APP_2,
    BOB,
    CAROL,
    CHANNEL,
    MALLORY,
    DiscordStandIn,
    choose,
    click,
    discord_settings,
    interaction,
    standin,
    submit_modal,
)

from askq import Caller, RequestState, Seam
from askq.answerers.discord import DiscordAnswerer

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
DEFERRED = {"type": 6}
EPHEMERAL = 64


@contextlib.asynccontextmanager
async def discord_worker(
    backend: Backend,
    standin: DiscordStandIn,
    group: str = "discord",
    priority: int = 0,
    **extra: Any,
) -> AsyncIterator[DiscordAnswerer]:
    timing = {k: extra.pop(k) for k in ("escalate_after", "remind_after") if k in extra}
    async with backend.seam() as worker_seam:
        answerer = DiscordAnswerer(settings=discord_settings(standin, **extra))
        async with running(worker_seam, answerer, group, priority, **timing):
            yield answerer


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


async def drop(*tasks: asyncio.Task[Any]) -> None:
    """End asks left pending at a test's end (their outcome is not what it checks)."""
    for task in tasks:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


def port_of(answerer: DiscordAnswerer) -> int:
    assert answerer.http_port is not None
    return answerer.http_port


def ephemeral_text(body: Any) -> str:
    assert body["type"] == 4, body
    assert body["data"]["flags"] == EPHEMERAL
    assert body["data"]["allowed_mentions"] == {"parse": []}
    return str(body["data"]["content"])


async def test_a_question_is_a_message_and_a_click_answers_it(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """The message is posted to the route's channel with the bot's token, a button per
    option; Alice's click is acknowledged with a deferred update, the caller gets the
    exact JSON, and the message is edited in place: the answer, no buttons."""
    async with discord_worker(backend, standin) as discord:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        assert posted.channel == CHANNEL
        [post] = standin.calls_to("post")
        assert post.token == "standin-bot-token-1"
        assert post.body["allowed_mentions"] == {"parse": []}
        assert posted.content.startswith("**Confirm**\nProceed with the destructive cleanup?")
        labels = [c["label"] for c in posted.components()]
        assert labels == [
            "Yes, delete them (Recommended)",
            "No, keep them",
            "Answer in my own words",
        ]
        assert posted.button("Yes")["style"] == 3  # the recommended option: success
        status, body = await standin.send(
            port_of(discord), click(posted, ALICE, posted.button("Yes"))
        )
        assert (status, body) == (200, DEFERRED)
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("edit")
        [final] = standin.edits_of(posted)
        assert final["content"].startswith("✅ **Answered** by Alice\n**Confirm**")
        assert "→ **Yes, delete them \\(Recommended\\)**" in final["content"]
        assert final["components"] == [] and final["allowed_mentions"] == {"parse": []}
        await standin.settle()
        assert len(standin.calls_to("edit")) == 1 and standin.calls_to("reply") == []


async def test_signatures_bad_stale_or_missing_are_refused_and_ping_is_answered(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """A PING is answered with a PONG (type 1), signed; unsigned, 401. Each click below
    is refused 401 and records nothing: no headers, a signature of another key, of
    another body, not hex, a timestamp six minutes old or ahead (a replay), a timestamp
    not matching its signature. The genuine click after them answers."""
    async with discord_worker(backend, standin) as discord:
        port = port_of(discord)
        assert await standin.send(port, {"type": 1, "application_id": "800000000000000001"}) == (
            200,
            {"type": 1},
        )
        assert (await standin.send(port, {"type": 1}, app=APP_2))[0] == 401
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        good = click(posted, ALICE, posted.button("Yes"))
        now = int(time.time())
        other_body = APP_2.sign(str(now), b"{}")
        refused: dict[str, dict[str, Any]] = {
            "no headers": {"headers": {}},
            "no timestamp": {"headers": {"X-Signature-Ed25519": "00" * 64}},
            "another key": {"app": APP_2},
            "another body": {"signature": other_body},
            "not hex": {"signature": "zz" * 64},
            "short": {"signature": "ab" * 10},
            "stale": {"timestamp": str(now - 360)},
            "ahead": {"timestamp": str(now + 360)},
            "not seconds": {"timestamp": "yesterday"},
        }
        for why, how in refused.items():
            status, _ = await standin.send(port, good, **how)
            assert status == 401, why
        # A signature made for one timestamp, sent with another.
        body_sig = discord_signature_for(good, now - 1)
        status, _ = await standin.send(port, good, signature=body_sig, timestamp=str(now))
        assert status == 401
        assert await state_of(seam, posted.request_id) is RequestState.CLAIMED
        assert standin.calls_to("edit") == []
        # Within the skew: a timestamp four minutes old is taken.
        status, body = await standin.send(port, good, timestamp=str(now - 240))
        assert (status, body) == (200, DEFERRED)
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON


def discord_signature_for(body: dict[str, Any], stamp: int) -> str:
    import json

    from discord_standin import APP

    return APP.sign(str(stamp), json.dumps(body).encode())


async def test_unlisted_people_are_refused_and_a_late_click_is_told_who_answered(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """On the acme route Alice may answer by her id and Bob through his role. Mallory,
    holding another role, is told only she may not (an ephemeral message) and nothing
    is recorded; Bob answers; Alice, late, is told Bob answered, and nothing changes."""
    async with discord_worker(backend, standin) as discord:
        port = port_of(discord)
        task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "acme"}))
        posted = await standin.message()
        status, body = await standin.send(port, click(posted, MALLORY, posted.button("No")))
        assert status == 200
        assert ephemeral_text(body) == (
            "You are not on the list of people who may answer this question."
        )
        # A DM-shaped interaction carries no roles: Bob's role does not count there.
        _, body = await standin.send(port, click(posted, BOB, posted.button("No"), dm=True))
        assert ephemeral_text(body).startswith("You are not on the list")
        await standin.settle()
        assert await state_of(seam, posted.request_id) is RequestState.CLAIMED
        assert standin.calls_to("edit") == []
        status, body = await standin.send(port, click(posted, BOB, posted.button("No")))
        assert body == DEFERRED
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()
        _, body = await standin.send(port, click(posted, ALICE, posted.button("Yes")))
        assert ephemeral_text(body) == "Already answered in Discord by Bob. Nothing was recorded."
        await standin.settle()
        [final] = standin.edits_of(posted)
        assert final["content"].startswith("✅ **Answered** by Bob")
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


async def test_a_multi_select_is_a_select_menu_that_answers_when_closed(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    async with discord_worker(backend, standin) as discord:
        task = asyncio.create_task(seam.ask({"questions": [LANGS]}, CALLER))
        posted = await standin.message()
        [select] = posted.selects()
        assert (select["min_values"], select["max_values"]) == (1, 3)
        assert [o["label"] for o in select["options"]] == [o["label"] for o in LANGS["options"]]
        assert select["options"][1]["description"] == "The CLI."
        assert "• **Go** — The CLI." in posted.content  # descriptions in the text too
        _, body = await standin.send(port_of(discord), choose(posted, ALICE, select, ["2", "0"]))
        assert body == DEFERRED
        assert (await asyncio.wait_for(task, 10)).to_json() == (
            '{"answers":[{"id":"langs","selected":["Python (Recommended)","Rust (Recommended)"]}]}'
        )
        await standin.wait_for("edit")


async def test_several_questions_are_chosen_then_submitted_with_the_modal_texts(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """Two questions (a multi-select, a free-text one): a select for the first, then
    Submit and the modal button. A choice is the clicker's draft (another person's
    draft is their own); Submit without the free text asks for it; the modal's text
    goes with the draft, answering both as one."""
    async with discord_worker(backend, standin) as discord:
        port = port_of(discord)
        task = asyncio.create_task(
            seam.ask({"questions": [LANGS, WHY]}, CALLER, scope={"tenant": "acme"})
        )
        posted = await standin.message()
        [select] = posted.selects()
        assert (select["min_values"], select["max_values"]) == (0, 3)
        assert [c["label"] for c in posted.components() if c["type"] == 2] == [
            "Submit",
            "Answer in my own words",
        ]
        assert (await standin.send(port, choose(posted, ALICE, select, ["1"])))[1] == DEFERRED
        assert (await standin.send(port, choose(posted, BOB, select, ["0"])))[1] == DEFERRED
        _, body = await standin.send(port, click(posted, ALICE, posted.button("Submit")))
        assert ephemeral_text(body) == "Please answer first: Reason"
        _, body = await standin.send(port, click(posted, ALICE, posted.button("Answer in")))
        assert body["type"] == 9
        modal = body["data"]
        assert modal["title"] == "Your answers"
        inputs = [row["components"][0] for row in modal["components"]]
        assert [(i["custom_id"], i["label"], i["style"]) for i in inputs] == [
            ("c0", "Languages", 2),
            ("c1", "Reason", 2),
        ]
        submitted = submit_modal(posted, ALICE, modal, {"c1": "The audit is on Friday."})
        assert (await standin.send(port, submitted))[1] == DEFERRED
        assert (await asyncio.wait_for(task, 10)).to_json() == (
            '{"answers":[{"id":"langs","selected":["Go"]},'
            '{"id":"why","selected":[],"custom":"The audit is on Friday."}]}'
        )
        await standin.wait_for("edit")
        [final] = standin.edits_of(posted)
        assert "→ **Go**" in final["content"]
        assert "→ “*The audit is on Friday.*”" in final["content"]


async def test_the_modal_gives_an_answer_of_ones_own(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """A single-select question answered in one's own words: the custom text overrides
    a choice (the contract's rule)."""
    async with discord_worker(backend, standin) as discord:
        port = port_of(discord)
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        _, body = await standin.send(port, click(posted, ALICE, posted.button("Answer in")))
        modal = body["data"]
        assert modal["title"] == "Confirm"
        [row] = modal["components"]
        assert row["components"][0]["required"] is False
        text = "Only the temp files"
        _, body = await standin.send(port, submit_modal(posted, ALICE, modal, {"c0": text}))
        assert body == DEFERRED
        assert (await asyncio.wait_for(task, 10)).to_json() == (
            '{"answers":[{"id":"cleanup","selected":[],"custom":"Only the temp files"}]}'
        )


async def test_a_dm_route_opens_the_dm_and_its_user_answers(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    async with discord_worker(backend, standin) as discord:
        task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "dm"}))
        posted = await standin.message()
        [dm] = standin.calls_to("dm")
        assert dm.body == {"recipient_id": CAROL.id}
        assert posted.channel == dm.channel
        _, body = await standin.send(
            port_of(discord), click(posted, CAROL, posted.button("No"), dm=True)
        )
        assert body == DEFERRED
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()
        await standin.wait_for("edit")
        # A second question to Carol reuses the DM channel kept in Redis.
        task = asyncio.create_task(
            seam.ask(SEED, Caller(agent_id="agent-7", turn_id="turn-2"), scope={"tenant": "dm"})
        )
        second = await standin.message(2)
        assert second.channel == dm.channel and len(standin.calls_to("dm")) == 1
        await drop(task)


async def test_a_withdrawn_question_is_edited_in_place_and_noted_once(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """The agent's turn is aborted: the message becomes "Cancelled (the turn was
    aborted)", its buttons gone; a reply says so once; a click afterwards is told."""
    async with discord_worker(backend, standin) as discord:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        await seam.abort_turn(CALLER.turn_id)
        await standin.wait_for("edit")
        [cancelled] = standin.edits_of(posted)
        assert cancelled["content"].startswith("🚫 **Cancelled** \\(the turn was aborted\\)")
        assert cancelled["components"] == []
        [note] = await standin.wait_for("reply")
        assert note.body["message_reference"]["message_id"] == posted.message_id
        assert note.body["content"] == cancelled["content"].split("\n")[0]
        assert note.body["allowed_mentions"] == {"parse": [], "replied_user": False}
        _, body = await standin.send(
            port_of(discord), click(posted, ALICE, posted.button("Answer in"))
        )
        assert "nothing was recorded" in ephemeral_text(body).lower()
        await standin.settle()
        assert len(standin.calls_to("edit")) == 1 and len(standin.calls_to("reply")) == 1
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


async def test_a_rate_limited_post_waits_retry_after_and_an_exhausted_bucket_is_not_called(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """A 429 on the post (retry_after 0.6 s) puts the send back for that long; the post
    then says its bucket is used up for 1.5 s (X-RateLimit-Remaining 0), so the next
    question's post waits for the reset instead of spending a request on a 429."""
    standin.fail_next("post", retry_after=0.6)
    standin.exhaust_next("post", reset_after=1.5)
    async with discord_worker(backend, standin):
        started = time.monotonic()
        first = asyncio.create_task(seam.ask(SEED, CALLER))
        await standin.message()
        [refused] = [c for c in standin.calls if c.status == 429]
        [post] = standin.calls_to("post")
        assert post.at - started >= 0.6 and post.at - refused.at >= 0.6
        second = asyncio.create_task(seam.ask(SEED, Caller(agent_id="agent-7", turn_id="t2")))
        await standin.message(2)
        [_, again] = standin.calls_to("post")
        assert again.at - post.at >= 1.4
        assert [c.status for c in standin.calls if c.op == "post"] == [429, 200, 200]
        await drop(first, second)


async def test_a_global_rate_limit_holds_every_call(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    standin.fail_next("post", retry_after=0.8, is_global=True)
    async with discord_worker(backend, standin) as discord:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        await standin.message()
        [refused] = [c for c in standin.calls if c.status == 429]
        assert refused.op == "post"
        assert discord.rest.limits._global_until > 0
        await drop(task)


HOSTILE_HEADER = "@everyone"
HOSTILE_QUESTION = (
    "**bold** __u__ ~~s~~ ||spoiler|| `code` <@123456789012345678> <@&123456789012345678>"
    " @here [click](https://evil.example) <t:1700000000:R> :skull:\n# Heading\n> quote\n"
    "-# small\n- item\n1. first"
)
HOSTILE_LABEL = "@everyone **Yes** <@123456789012345678>"


async def test_hostile_agent_text_is_inert(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """Markdown, mentions, masked links, timestamps and headings in an agent's text are
    shown as written: every markup character escaped, @everyone and @here broken by a
    zero-width space, allowed_mentions empty on the question, the edit and the
    ephemeral refusal; labels are plain text (Discord does not read markup there)."""
    question = {
        "questions": [
            {
                "id": "q",
                "header": HOSTILE_HEADER,
                "question": HOSTILE_QUESTION,
                "options": [{"label": HOSTILE_LABEL}, {"label": "No"}],
            }
        ]
    }
    async with discord_worker(backend, standin) as discord:
        task = asyncio.create_task(seam.ask(question, Caller(agent_id="<@1>", turn_id="t")))
        posted = await standin.message()
        content = posted.content
        assert "@everyone" not in content and "@here" not in content
        assert "@\u200beveryone" in content and "@\u200bhere" in content
        assert "<@" not in content.replace("\\<@", "")
        assert "\\*\\*bold\\*\\*" in content and "\\[click\\]\\(https\\://evil" in content
        assert "\n\\# Heading\n\\> quote\n\\-\\# small\n\\- item\n1\\. first" in content
        assert rendered(content).startswith(f"**{HOSTILE_HEADER}**\n{HOSTILE_QUESTION}")
        assert posted.button("@everyone")["label"] == HOSTILE_LABEL  # plain text there
        _, body = await standin.send(port_of(discord), click(posted, MALLORY, posted.button("No")))
        ephemeral_text(body)
        await standin.send(port_of(discord), click(posted, ALICE, posted.button("@every")))
        await asyncio.wait_for(task, 10)
        [edit] = await standin.wait_for("edit")
        assert "@everyone" not in edit.body["content"] and "<@" not in edit.body["content"].replace(
            "\\<@", ""
        )
        for call in standin.calls:
            assert call.op == "dm" or call.body["allowed_mentions"]["parse"] == [], call.op


def rendered(content: str) -> str:
    """The content as Discord shows it once escapes are read: a backslash before
    punctuation vanishes, the zero-width space is invisible."""
    import re

    return re.sub(r"\\([^A-Za-z0-9\s])", r"\1", content).replace("\u200b", "")


async def test_foreign_and_malformed_components_are_told_and_record_nothing(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    async with discord_worker(backend, standin) as discord:
        port = port_of(discord)
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        foreign = interaction(3, ALICE, {"custom_id": "someone-elses", "component_type": 2})
        assert ephemeral_text((await standin.send(port, foreign))[1]) == (
            "This message is not one of askq's."
        )
        broken = interaction(3, ALICE, {"custom_id": "aq1|p|zz", "component_type": 2})
        assert "not one of askq's" in ephemeral_text((await standin.send(port, broken))[1])
        cid = posted.button("Yes")["custom_id"]
        gone = interaction(3, ALICE, {"custom_id": cid.replace(posted.request_id, "nope")})
        assert ephemeral_text((await standin.send(port, gone))[1]) == (
            "This question has expired: nothing was recorded."
        )
        beyond = interaction(3, ALICE, {"custom_id": cid[: cid.rindex("|")] + "|7"})
        assert "does not fit" in ephemeral_text((await standin.send(port, beyond))[1])
        status, _ = await standin.send(port, {"type": "x"})
        assert status == 400
        command = interaction(2, ALICE, {"name": "ask"})
        assert "only its own" in ephemeral_text((await standin.send(port, command))[1])
        assert await state_of(seam, posted.request_id) is RequestState.CLAIMED
        await drop(task)


async def test_a_slow_answer_is_acknowledged_in_time_and_a_refusal_follows_up(
    backend: Backend, seam: Seam, standin: DiscordStandIn, monkeypatch: Any
) -> None:
    """Discord waits 3 s for the response. With no time left for the answer to land
    (ACK_SECONDS 0 here), a click is acknowledged with a deferred update at once and
    the answer goes on: the message is edited, and a late click's refusal reaches the
    clicker as an ephemeral follow-up through the interaction's webhook."""
    monkeypatch.setattr("askq.answerers.discord._interactions.ACK_SECONDS", 0.0)
    async with discord_worker(backend, standin) as discord:
        port = port_of(discord)
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        assert await standin.send(port, click(posted, ALICE, posted.button("Yes"))) == (
            200,
            DEFERRED,
        )
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await standin.wait_for("edit")
        late = click(posted, ALICE, posted.button("No"))
        assert (await standin.send(port, late))[1] == DEFERRED
        [follow_up] = await standin.wait_for("follow_up")
        assert follow_up.channel == late["token"]
        assert follow_up.body["flags"] == EPHEMERAL
        assert follow_up.body["content"] == (
            "Already answered in Discord by Alice. Nothing was recorded."
        )


async def test_a_reminder_is_a_reply_once(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    from conftest import sweeping

    async with sweeping(backend), discord_worker(backend, standin, remind_after=0.5) as discord:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        posted = await standin.message()
        [reminder] = await standin.wait_for("reply")
        assert reminder.channel == CHANNEL
        assert reminder.body["message_reference"]["message_id"] == posted.message_id
        assert reminder.body["content"] == "⏰ Still waiting for an answer to this question."
        await standin.send(port_of(discord), click(posted, ALICE, posted.button("No")))
        await asyncio.wait_for(task, 10)
        await standin.settle(0.5)
        assert len(standin.calls_to("reply")) == 1  # no note: it was answered on the message
