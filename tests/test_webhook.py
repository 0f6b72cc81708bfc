"""The webhook answerer against receivers on 127.0.0.1 (tests/webhook_receiver.py):
each question POSTed signed per Standard Webhooks (verified with the standardwebhooks
package, as a receiver would), answered through the group's callback with its
single-use token, retried on a 5xx, given up after its tries (the next tier gets it),
and closed with a signed event when it settles. Against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from conftest import NO, SEED, YES, YES_JSON, Backend, running, sweeping
from webhook_receiver import Receiver, answer, receiver, webhook_settings

from askq import Caller, ErrorCode, RequestState, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.answerers.webhook import WebhookAnswerer

__all__ = ["receiver"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")


@contextlib.asynccontextmanager
async def webhook_worker(
    backend: Backend, receiver: Receiver, group: str = "hooks", priority: int = 0, **extra: Any
) -> AsyncIterator[WebhookAnswerer]:
    timing = {k: extra.pop(k) for k in ("escalate_after", "remind_after") if k in extra}
    async with backend.seam() as worker_seam:
        answerer = WebhookAnswerer(settings=webhook_settings(receiver, **extra))
        async with running(worker_seam, answerer, group, priority, **timing):
            yield answerer


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


def stored_values(backend: Backend) -> str:
    """Every string and hash value the deployment keeps, as one text."""
    client = backend.sync_client()
    out: list[str] = []
    try:
        for key in backend.keys():
            kind = client.type(key)
            if kind == "string":
                out.append(str(client.get(key)))
            elif kind == "hash":
                out.extend(str(v) for v in client.hgetall(key).values())
    finally:
        client.close()
    return "\n".join(out)


async def test_a_question_is_posted_signed_and_the_callback_answers_it(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """The question.asked event verifies with the standardwebhooks package and carries
    the questions as asked, the callback URL and a token; POSTing the answer there with
    the token answers (200, the accepted answers), the agent resumes with the exact
    JSON, and a signed question.settled follows. Redis never holds the token."""
    async with webhook_worker(backend, receiver) as hooks:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        assert asked.event is not None  # verified: webhook-id, -timestamp, -signature
        assert asked.headers["webhook-id"].startswith("msg_")
        assert asked.headers["webhook-signature"].startswith("v1,")
        assert asked.headers["content-type"] == "application/json"
        assert asked.event["version"] == 1 and asked.event["timestamp"].endswith("Z")
        data = asked.data
        assert data["group"] == "hooks" and data["scope"] == {}
        assert data["summary"] == "Confirm: Proceed with the destructive cleanup?"
        [question] = data["questions"]
        assert question["id"] == "cleanup" and question["multiSelect"] is False
        assert [o["label"] for o in question["options"]] == [
            "Yes, delete them (Recommended)",
            "No, keep them",
        ]
        url = data["answer"]["url"]
        assert (
            url == f"http://127.0.0.1:{hooks.http_port}/webhook/hooks/answers/{data['request_id']}"
        )
        token = data["answer"]["token"]
        assert len(token) >= 40
        assert token not in stored_values(backend)
        status, body = await answer(asked, YES)
        assert status == 200, body
        assert body == {"status": "answered", "answers": YES}
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        settled = await receiver.wait_for("question.settled")
        assert settled.data == {
            "request_id": data["request_id"],
            "group": "hooks",
            "state": "answered",
            "reason": "answered_here",
            "text": "Answered through a webhook by alice",
            "answers": YES,
        }
        assert settled.id != asked.id
        settlement = await seam.settlement(data["request_id"])
        assert settlement is not None and settlement.by == "webhook:alice"


async def test_a_5xx_is_retried_with_the_same_message_and_token(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """The receiver answers 500, then 503: the question is POSTed again (backoff), the
    third time taken. Every POST is the same message (webhook-id, body and so the
    token), each signed afresh; the token answers."""
    receiver.statuses = [500, 503]
    async with webhook_worker(backend, receiver):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        posts = receiver.of("question.asked")
        assert [p.status for p in posts] == [500, 503, 200]
        assert {p.id for p in posts} == {asked.id}
        assert {p.body for p in posts} == {asked.body}
        assert all(p.event is not None for p in posts)
        status, _ = await answer(asked, NO)
        assert status == 200
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()


async def test_a_post_that_times_out_is_tried_again(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """The receiver sits on the first POST past ASKQ_WEBHOOK_TIMEOUT (0.5 s here): askq
    gives up on that attempt and POSTs the same message again, which is taken."""
    held = receiver.hold_next()
    async with webhook_worker(backend, receiver, timeout=0.5):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        await asyncio.wait_for(held.reached.wait(), 10)
        asked = await receiver.wait_for("question.asked")
        held.release.set()  # the first attempt's answer, to a client long gone
        status, _ = await answer(asked, YES)
        assert status == 200
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await receiver.wait_for("question.asked", 2)
        assert {p.id for p in receiver.of("question.asked")} == {asked.id}


async def test_giving_up_after_the_tries_lets_the_next_tier_answer(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """The receiver is down (500 every time): after ASKQ_WEBHOOK_TRIES (3) POSTs the
    group gives the question back and the next tier answers it; nothing is POSTed
    after that, and the token of the failed delivery answers nothing."""
    receiver.statuses = [500] * 10
    human = MemoryAnswerer()
    async with (
        webhook_worker(backend, receiver, priority=0, tries=3),
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 10),
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        offer = await human.next_presented(timeout=20)
        assert [p.status for p in receiver.of("question.asked")] == [500, 500, 500]
        first = receiver.of("question.asked")[0]
        status, body = await answer(first, YES)
        assert status == 409 and body["error"] == "already_settled", body
        await human.answer(offer.request_id, NO)
        assert "No, keep them" in (await asyncio.wait_for(task, 10)).to_json()
        await receiver.settle()
        assert len(receiver.received) == 3  # never delivered: nothing to close


async def test_a_4xx_is_refused_for_good_and_the_next_tier_gets_it_at_once(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """A 410 from the receiver is not retried: one POST, and the next tier has it."""
    receiver.statuses = [410]
    human = MemoryAnswerer()
    async with (
        webhook_worker(backend, receiver, priority=0, tries=5),
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 10),
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        offer = await human.next_presented(timeout=10)
        await human.answer(offer.request_id, YES)
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        await receiver.settle()
        assert [p.status for p in receiver.received] == [410]


async def test_the_token_answers_once_and_bad_answers_are_refused_recording_nothing(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """Each refusal records nothing and leaves the token good: no token, a wrong one
    (401), another group's path (404), not JSON (400), answers that do not fit (422,
    naming what is wrong). Then the token answers, and a second POST with it gets 409
    saying who answered."""
    async with webhook_worker(backend, receiver):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        request_id = asked.data["request_id"]
        url = asked.data["answer"]["url"]
        async with httpx.AsyncClient() as client:
            no_token = await client.post(url, json={"answers": YES})
            assert no_token.status_code == 401
            assert "Authorization: Bearer" in no_token.json()["message"]
            not_json = await client.post(
                url, content=b"{nope", headers={"Authorization": "Bearer x"}
            )
            assert not_json.status_code == 400 and not_json.json()["error"] == "bad_request"
        status, body = await answer(asked, YES, token="A" * 43)
        assert (status, body["error"]) == (401, "unauthorized")
        other = url.replace("/webhook/hooks/", "/webhook/other/")
        status, body = await answer(asked, YES, url=other)
        assert (status, body["error"]) == (404, "not_found")
        status, body = await answer(asked, [{"id": "cleanup", "selected": ["Maybe"]}])
        assert status == 422 and body["error"] == "invalid_answer"
        assert 'no option labelled "Maybe"' in body["message"]
        status, body = await answer(asked, [{"id": "nope", "selected": []}])
        assert status == 422 and 'no question with id "nope"' in body["message"]
        status, body = await answer(asked, "yes")
        assert status == 422
        status, body = await answer(asked, YES, by="")
        assert status == 400 and body["message"].startswith("by:")
        assert await state_of(seam, request_id) is RequestState.CLAIMED
        status, body = await answer(asked, YES, by="bob")
        assert status == 200
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        status, body = await answer(asked, NO, by="mallory")
        assert status == 409 and body == {
            "error": "already_settled",
            "message": "Answered through a webhook by bob. Nothing was recorded.",
        }


async def test_two_answers_at_once_settle_once(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """Ten POSTs of the token at once: one 200, nine 409."""
    async with webhook_worker(backend, receiver):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        replies = await asyncio.gather(*(answer(asked, YES, by=f"p{i}") for i in range(10)))
        assert sorted(status for status, _ in replies) == [200] + [409] * 9
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON


async def test_answered_elsewhere_withdrawn_and_escalated_are_posted(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """Answered by another group of the tier: question.settled "answered_elsewhere";
    the turn aborted: "turn_aborted", "Cancelled (the turn was aborted)". The token
    then gets 409 with those words."""
    human = MemoryAnswerer(by="slack:U0123 (bob)")
    async with (
        webhook_worker(backend, receiver),
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 0),
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        offer = await human.next_presented(timeout=10)
        await human.answer(offer.request_id, NO)
        await asyncio.wait_for(task, 10)
        settled = await receiver.wait_for("question.settled")
        assert settled.data["state"] == "answered"
        assert settled.data["reason"] == "answered_elsewhere"
        assert settled.data["text"] == "Answered in Slack by bob"
        assert settled.data["answers"] == NO
        status, body = await answer(asked, YES)
        assert status == 409 and body["message"].startswith("Answered in Slack by bob.")

        aborted = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t2")))
        asked = await receiver.wait_for("question.asked", 2, distinct=True)
        await human.next_presented(timeout=10)
        await seam.abort_turn("t2")
        try:
            await asyncio.wait_for(aborted, 10)
        except Exception as exc:  # noqa: BLE001
            assert getattr(exc, "code", None) is ErrorCode.ABORTED
        settled = await receiver.wait_for("question.settled", 2, distinct=True)
        assert settled.data["state"] == "cancelled"
        assert settled.data["reason"] == "turn_aborted"
        assert settled.data["text"] == "Cancelled (the turn was aborted)"
        assert "answers" not in settled.data
        status, body = await answer(asked, YES)
        assert status == 409 and "Cancelled (the turn was aborted)" in body["message"]


async def test_an_escalation_and_a_timeout_are_posted(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """The group's escalation deadline passes: question.escalated, and the token no
    longer answers; an ask that times out: question.settled "timed_out"."""
    human = MemoryAnswerer()
    async with (
        sweeping(backend),
        webhook_worker(backend, receiver, priority=0, escalate_after=1.0),
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 10),
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        escalated = await receiver.wait_for("question.escalated")
        assert escalated.data["state"] == "escalated"
        assert escalated.data["text"] == "Escalated to another answerer"
        status, body = await answer(asked, YES)
        assert status == 409
        assert body["message"].startswith("Escalated to another answerer: this token no longer")
        offer = await human.next_presented(timeout=10)
        await human.answer(offer.request_id, YES)
        await asyncio.wait_for(task, 10)

        late = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t3"), timeout=0.5))
        await receiver.wait_for("question.asked", 2, distinct=True)
        try:
            await asyncio.wait_for(late, 10)
        except Exception as exc:  # noqa: BLE001
            assert getattr(exc, "code", None) is ErrorCode.TIMED_OUT
        settled = await receiver.wait_for("question.settled")
        assert settled.data["reason"] == "timed_out"
        assert settled.data["text"] == "Cancelled (the ask timed out)"


HOSTILE = (
    'Delete "prod"? \\ </script><script>alert(1)</script> {{7*7}} ${jndi:ldap://x} '
    "*bold* <@everyone> \u202eevil\u202c 🧨\nline two\t'quoted'"
)


async def test_agent_text_arrives_as_data(backend: Backend, seam: Seam, receiver: Receiver) -> None:
    """Hostile agent text is JSON-escaped by the encoder and arrives intact, nothing
    interpreted or cut; the body is valid JSON whose strings are exactly the agent's."""
    questions = [
        {
            "id": "q1",
            "header": "</h1>",
            "question": HOSTILE,
            "options": [
                {"label": '"}]}, {"injected": true', "description": HOSTILE},
                {"label": "plain"},
            ],
        }
    ]
    async with webhook_worker(backend, receiver):
        task = asyncio.create_task(seam.ask({"questions": questions}, CALLER))
        asked = await receiver.wait_for("question.asked")
        [question] = asked.data["questions"]
        assert question["question"] == HOSTILE
        assert question["id"] == "q1" and question["header"] == "</h1>"
        assert question["options"][0] == {
            "label": '"}]}, {"injected": true',
            "description": HOSTILE,
        }
        assert "injected" not in asked.event  # type: ignore[operator]
        assert json.loads(asked.body) == asked.event
        answers = [{"id": "q1", "selected": ['"}]}, {"injected": true']}]
        status, _ = await answer(asked, answers, by='<b>"eve"</b>')
        assert status == 200
        result = await asyncio.wait_for(task, 10)
        assert result.answers[0].selected == ['"}]}, {"injected": true']
        settled = await receiver.wait_for("question.settled")
        assert settled.data["text"] == 'Answered through a webhook by <b>"eve"</b>'


async def test_routes_send_each_scope_to_its_receiver_and_decline_the_rest(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """ASKQ_WEBHOOK_ROUTES: tenant=acme to a second receiver (same secret), others to
    the first; a scope no route matches is declined and the next tier has it."""
    acme = Receiver(receiver.secret)
    await acme.start()
    human = MemoryAnswerer()
    routes = json.dumps({"tenant=acme": acme.url, "tenant=beta": receiver.url})
    try:
        async with (
            webhook_worker(backend, receiver, url="", routes=routes),
            backend.seam() as desk_seam,
            running(desk_seam, human, "desk", 10),
        ):
            task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "acme"}))
            asked = await acme.wait_for("question.asked")
            assert asked.data["scope"] == {"tenant": "acme"}
            assert (await answer(asked, YES))[0] == 200
            await asyncio.wait_for(task, 10)
            other = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "zeta"}))
            offer = await human.next_presented(timeout=10)
            await human.answer(offer.request_id, NO)
            await asyncio.wait_for(other, 10)
            assert receiver.received == []
    finally:
        await acme.stop()


async def test_a_reminder_is_posted_once_per_gap(
    backend: Backend, seam: Seam, receiver: Receiver
) -> None:
    """The group's reminder delay passes: a signed question.reminder, the question
    still answerable with its token."""
    async with sweeping(backend), webhook_worker(backend, receiver, remind_after=0.5):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked = await receiver.wait_for("question.asked")
        reminder = await receiver.wait_for("question.reminder")
        assert reminder.event is not None and reminder.id != asked.id
        assert reminder.data == {
            "request_id": asked.data["request_id"],
            "group": "hooks",
            "summary": "Confirm: Proceed with the destructive cleanup?",
        }
        assert (await answer(asked, YES))[0] == 200
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
