"""The email answerer end to end: questions asked from Python, mailed to an SMTP sink
on loopback, answered by replies submitted with smtplib to the worker's listener (or
posted to its HTTP endpoint), against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import smtplib
import ssl
import subprocess
from collections.abc import AsyncIterator
from email import policy
from typing import Any

import aiohttp
import dkim
import httpx
import pytest
from conftest import SEED, YES_JSON, Backend, running, sweeping
from email_standin import (
    ALICE,
    BOB,
    DOMAIN,
    MALLORY,
    SECRET,
    Sent,
    SmtpSink,
    email_settings,
    reply_to,
    sink,
    submit,
)

from askq import Answers, AskError, Caller, RequestState, Seam, SignedLinks
from askq.answerers.email import EmailAnswerer
from askq.answerers.email._dkim import dkim_check
from askq.answerers.memory import MemoryAnswerer

__all__ = ["sink"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
SOLO = {"tenant": "solo"}
ACME = {"tenant": "acme"}
NO_JSON = '{"answers":[{"id":"cleanup","selected":["No, keep them"]}]}'

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
    "options": [{"label": "eu-west-1 (Recommended)"}, {"label": "us-east-1"}],
}
NAME: dict[str, Any] = {"id": "name", "header": "Name", "question": "What is it called?"}


class QuickToGiveUp(EmailAnswerer):
    send_tries = 2


@contextlib.asynccontextmanager
async def email_worker(
    backend: Backend,
    sink: SmtpSink,
    *,
    priority: int = 0,
    cls: type[EmailAnswerer] = EmailAnswerer,
    dkim: Any = None,
    consumer: str | None = None,
    **extra: Any,
) -> AsyncIterator[EmailAnswerer]:
    async with backend.seam() as worker_seam:
        answerer = cls(settings=email_settings(sink, **extra), dkim=dkim)
        async with running(worker_seam, answerer, "email", priority, consumer=consumer):
            yield answerer


def asking(seam: Seam, questions: Any, scope: dict[str, str] = SOLO) -> asyncio.Task[Answers]:
    return asyncio.create_task(seam.ask(questions, CALLER, scope=scope))


async def answered(task: asyncio.Task[Answers]) -> str:
    return (await asyncio.wait_for(task, 10)).to_json()


def port(answerer: EmailAnswerer) -> int:
    assert answerer.listener is not None and answerer.listener.port is not None
    return answerer.listener.port


def request_id_of(question: Sent) -> str:
    return question.header("X-Askq-Request")


async def still_pending(seam: Seam, request_id: str) -> bool:
    status = await seam.request_status(request_id)
    return status is not None and status.state in (RequestState.OFFERED, RequestState.CLAIMED)


# --- the round trip --------------------------------------------------------------------


async def test_a_reply_of_1_answers_and_the_caller_gets_the_exact_json(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        request_id = request_id_of(question)
        assert question.rcpt_tos == (ALICE,)
        assert re.fullmatch(rf"bounce\+{request_id}\.[a-z2-7]{{16}}@{DOMAIN}", question.mail_from)
        assert re.fullmatch(
            rf"answer\+{request_id}\.[a-z2-7]{{16}}@{DOMAIN}", question.header("Reply-To")
        )
        assert question.header("Message-ID").startswith(f"<askq.{request_id}.")
        assert question.message.get_content_type() == "multipart/alternative"
        assert "Reply with 1 or 2" in question.text()
        assert "No, keep them" in question.html()

        reply = reply_to(question, "1")  # quoted history, signature, an HTML part
        await submit(port(email), reply)
        assert await answered(task) == YES_JSON

        (feedback,) = (await sink.wait(2))[1:]
        assert feedback.rcpt_tos == (ALICE,)
        assert "Recorded: Yes, delete them (Recommended)" in feedback.text()
        assert feedback.header("In-Reply-To") == str(reply["Message-ID"])
        assert str(reply["Message-ID"]) in feedback.header("References")
        assert feedback.header("Subject").startswith("Re: [askq] ")


async def test_each_recipient_gets_an_address_of_their_own(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED, ACME)
        questions = await sink.wait(2)
        by_recipient = {q.rcpt_tos[0]: q for q in questions}
        assert set(by_recipient) == {ALICE, BOB}
        assert by_recipient[ALICE].header("Reply-To") != by_recipient[BOB].header("Reply-To")
        assert by_recipient[ALICE].header("Message-ID") != by_recipient[BOB].header("Message-ID")
        await submit(port(email), reply_to(by_recipient[BOB], "no, keep them"), mail_from=BOB)
        assert await answered(task) == NO_JSON


async def test_a_reply_at_another_replica_answers(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """Replicas share nothing but Redis: the one whose listener gets the reply need not
    be the one that mailed the question."""
    async with (
        email_worker(backend, sink, consumer="one") as one,
        email_worker(backend, sink, consumer="two") as two,
    ):
        task = asking(seam, SEED, ACME)
        questions = {q.rcpt_tos[0]: q for q in await sink.wait(2)}
        await sink.settle(0.3)
        assert len(sink.sent) == 2  # each recipient mailed once, by one replica or the other
        await submit(port(one), reply_to(questions[ALICE], "7"))  # unreadable, told at one
        told = (await sink.wait(3))[2]
        await submit(port(two), reply_to(told, "2"))  # the corrected reply, at two
        assert await answered(task) == NO_JSON


# --- refused, and nothing recorded -----------------------------------------------------


async def refused(email: EmailAnswerer, message: Any, **kwargs: Any) -> int:
    with pytest.raises(smtplib.SMTPDataError) as caught:
        await submit(port(email), message, **kwargs)
    return caught.value.smtp_code


async def test_a_forged_mac_is_refused_and_nothing_is_recorded(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        reply = reply_to(question, "1")
        forged = re.sub(r"\.[a-z2-7]{16}@", ".aaaaaaaaaaaaaaaa@", str(reply["To"]))
        reply.replace_header("To", forged)
        assert await refused(email, reply) == 550
        # another request's id under Alice's MAC does not verify either
        other = re.sub(r"\+[0-9a-f]{32}\.", "+" + "0" * 32 + ".", question.header("Reply-To"))
        reply.replace_header("To", other)
        assert await refused(email, reply) == 550
        await sink.settle()
        assert len(sink.sent) == 1  # no feedback to a forger
        assert await still_pending(seam, request_id_of(question))
        task.cancel()


async def test_a_reply_from_another_sender_is_refused(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED, ACME)
        questions = await sink.wait(2)
        alices = next(q for q in questions if q.rcpt_tos == (ALICE,))
        # Mallory, who got hold of Alice's reply address
        assert await refused(email, reply_to(alices, "1", sender=MALLORY), mail_from=MALLORY) == 550
        # Bob may answer, but not through the address that was sent to Alice
        assert await refused(email, reply_to(alices, "1", sender=BOB), mail_from=BOB) == 550
        await sink.settle()
        assert len(sink.sent) == 2
        assert await still_pending(seam, request_id_of(alices))
        task.cancel()


async def test_mail_to_any_other_address_is_refused_at_rcpt(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            await submit(port(email), b"Subject: hi\r\n\r\nhello\r\n", rcpt_to=[f"ops@{DOMAIN}"])


async def test_a_reply_after_settlement_is_told_already_answered(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED, ACME)
        questions = {q.rcpt_tos[0]: q for q in await sink.wait(2)}
        await submit(port(email), reply_to(questions[ALICE], "2"))
        assert await answered(task) == NO_JSON
        await sink.wait(3)  # Alice's "Recorded"
        await submit(port(email), reply_to(questions[BOB], "1", sender=BOB), mail_from=BOB)
        late = (await sink.wait(4))[3]
        assert late.rcpt_tos == (BOB,)
        assert re.search(
            rf"Already answered in an email reply by {ALICE} at \d{{4}}-\d\d-\d\d \d\d:\d\d UTC",
            late.text(),
        )
        settlement = await seam.settlement(request_id_of(questions[ALICE]))
        assert settlement is not None and settlement.by == f"email:{ALICE}"


async def test_an_automatic_reply_is_ignored(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        for headers in (
            {"Auto-Submitted": "auto-replied"},
            {"X-Autoreply": "yes"},
            {"Subject": "Out of Office: back on Monday"},
        ):
            auto = reply_to(question, "I am away until Monday. 1", quote=False)
            for name, value in headers.items():
                del auto[name]
                auto[name] = value
            await submit(port(email), auto)  # accepted (250), and ignored
        await sink.settle()
        assert len(sink.sent) == 1  # no feedback: never answer an auto-reply
        assert await still_pending(seam, request_id_of(question))
        await submit(port(email), reply_to(question, "1"))
        assert await answered(task) == YES_JSON


def delivery_report(question: Sent, recipient: str, action: str = "failed") -> bytes:
    return (
        f"From: Mail Delivery System <MAILER-DAEMON@acme.example>\r\n"
        f"To: {question.mail_from}\r\n"
        f"Subject: Undelivered Mail Returned to Sender\r\n"
        f"Auto-Submitted: auto-replied\r\n"
        f"MIME-Version: 1.0\r\n"
        f'Content-Type: multipart/report; report-type=delivery-status; boundary="b1"\r\n'
        f"\r\n--b1\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
        f"--b1\r\nContent-Type: message/delivery-status\r\n\r\n"
        f"Reporting-MTA: dns; mx.acme.example\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\nAction: {action}\r\nStatus: 5.1.1\r\n"
        f"Diagnostic-Code: smtp; 550 5.1.1 user unknown\r\n"
        f"\r\n--b1--\r\n"
    ).encode()


async def test_bounces_release_the_claim_once_every_recipient_bounced(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    async with email_worker(backend, sink) as email, running(seam, memory, "humans", 10):
        task = asking(seam, SEED, ACME)
        questions = {q.rcpt_tos[0]: q for q in await sink.wait(2)}
        alice, bob = questions[ALICE], questions[BOB]
        # a delay notice, and a bounce to an address with a made-up MAC: no effect
        await submit(
            port(email),
            delivery_report(alice, ALICE, "delayed"),
            mail_from="",
            rcpt_to=[alice.mail_from],
        )
        with pytest.raises(smtplib.SMTPDataError):
            await submit(
                port(email),
                delivery_report(alice, BOB),
                mail_from="",
                rcpt_to=[re.sub(r"\.[a-z2-7]{16}@", ".aaaaaaaaaaaaaaaa@", alice.mail_from)],
            )
        await submit(
            port(email), delivery_report(alice, ALICE), mail_from="", rcpt_to=[alice.mail_from]
        )
        await sink.settle(0.3)
        assert not task.done()  # Bob may still answer
        assert await still_pending(seam, request_id_of(alice))
        await submit(port(email), delivery_report(bob, BOB), mail_from="", rcpt_to=[bob.mail_from])
        assert await answered(task) == NO_JSON  # the next tier answered
        offer = await memory.next_presented()
        assert offer.request_id == request_id_of(alice)
        assert len(sink.sent) == 2  # no feedback to a mailer daemon


# --- what a reply may say --------------------------------------------------------------


async def test_multi_select_reply(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, [LANGS])
        (question,) = await sink.wait(1)
        assert "e.g. 1, 3" in question.text()
        await submit(port(email), reply_to(question, "1, 3"))
        assert await answered(task) == (
            '{"answers":[{"id":"langs","selected":["Python (Recommended)","Rust (Recommended)"]}]}'
        )


async def test_multi_question_reply(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, [REGION, LANGS, NAME])
        (question,) = await sink.wait(1)
        assert "Question 2 of 3" in question.text()
        await submit(port(email), reply_to(question, "1: us-east-1\n2: 2 3\n3: askq"))
        assert await answered(task) == (
            '{"answers":[{"id":"region","selected":["us-east-1"]},'
            '{"id":"langs","selected":["Go","Rust (Recommended)"]},'
            '{"id":"name","selected":[],"custom":"askq"}]}'
        )


async def test_own_words_answer_as_custom(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        await submit(port(email), reply_to(question, "Only the ones older than a week."))
        assert await answered(task) == (
            '{"answers":[{"id":"cleanup","selected":[],'
            '"custom":"Only the ones older than a week."}]}'
        )


async def test_an_html_only_reply_answers(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        reply = reply_to(question, "2")
        html_part = reply.get_body(preferencelist=("html",))
        assert html_part is not None
        html_only = reply_to(question, "x", html=False)
        html_only.set_content(str(html_part.get_content()), subtype="html")
        await submit(port(email), html_only)
        assert await answered(task) == NO_JSON


async def test_an_unreadable_reply_is_told_why_and_shown_the_options(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        first = reply_to(question, "7")
        await submit(port(email), first)
        told = (await sink.wait(2))[1]
        assert "I could not read your answer: there is no option 7; choose 1 or 2" in told.text()
        assert "No, keep them" in told.text()  # the options again
        assert told.header("In-Reply-To") == str(first["Message-ID"])
        assert told.header("Reply-To") == question.header("Reply-To")
        assert await still_pending(seam, request_id_of(question))
        await submit(port(email), reply_to(told, "No, keep them"))
        assert await answered(task) == NO_JSON


# --- sending -----------------------------------------------------------------------------


async def test_a_permanent_send_failure_falls_through_to_the_next_tier(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    sink.refuse_next("550 5.1.1 no such user")
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    async with email_worker(backend, sink), running(seam, memory, "humans", 10):
        assert await answered(asking(seam, SEED)) == NO_JSON
    assert sink.sent == []  # refused once, not retried


async def test_a_send_that_keeps_failing_is_released_after_its_tries(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    sink.refuse_next("451 4.3.0 try later")
    sink.refuse_next("451 4.3.0 try later")
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    async with (
        email_worker(backend, sink, cls=QuickToGiveUp),
        running(seam, memory, "humans", 10),
    ):
        assert await answered(asking(seam, SEED)) == NO_JSON
    assert sink.sent == []


async def test_a_transient_failure_is_retried(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    sink.refuse_next("451 4.3.0 try later")
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        await submit(port(email), reply_to(question, "1"))
        assert await answered(task) == YES_JSON


async def test_send_question_mails_once_however_often_it_runs(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        request_id = request_id_of(question)
        await sink.settle(0.3)  # its bookkeeping done: a repeated job finds it sent
        await asyncio.gather(*(email.send_question(request_id, ALICE) for _ in range(3)))
        await sink.settle()
        assert len(sink.sent) == 1
        task.cancel()


async def test_a_reminder_is_a_reply_in_the_thread(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        request_id = request_id_of(question)
        await asyncio.gather(*(email.send_reminder(request_id, ALICE) for _ in range(2)))
        assert len(sink.sent) == 2  # the question, one reminder
        reminder = sink.sent[1]
        assert reminder.header("In-Reply-To") == question.header("Message-ID")
        assert reminder.header("Subject") == "Re: " + question.header("Subject")
        assert reminder.text().count("Reminder: this question is still waiting") == 1
        await submit(port(email), reply_to(reminder, "1"))
        assert await answered(task) == YES_JSON


async def test_a_reminder_that_fails_for_a_while_is_retried(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        sink.refuse_next("451 4.3.0 try later")
        await email.group.send("send_reminder", request_id=request_id_of(question), recipient=ALICE)
        reminder = (await sink.wait(2))[1]
        assert reminder.header("In-Reply-To") == question.header("Message-ID")
        task.cancel()


async def test_the_groups_reminder_arrives_in_the_thread(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """The sweeper's reminder timer (`--remind-after`) reaches the email group, which
    mails each recipient the question again as a reply in its thread."""
    async with backend.seam() as worker_seam, sweeping(backend):
        answerer = EmailAnswerer(settings=email_settings(sink))
        async with running(worker_seam, answerer, "email", 0, remind_after=0.5):
            task = asking(seam, SEED, ACME)
            questions = {q.rcpt_tos[0]: q for q in await sink.wait(2)}
            reminders = {r.rcpt_tos[0]: r for r in (await sink.wait(4, timeout=15))[2:]}
            assert set(reminders) == {ALICE, BOB}
            for who, reminder in reminders.items():
                assert reminder.header("In-Reply-To") == questions[who].header("Message-ID")
                assert "Reminder: this question is still waiting" in reminder.text()
            await submit(port(answerer), reply_to(reminders[BOB], "2"), mail_from=BOB)
            assert await answered(task) == NO_JSON


async def test_no_route_declines(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    memory = MemoryAnswerer(reply=lambda o: [{"id": "cleanup", "selected": ["No, keep them"]}])
    async with email_worker(backend, sink), running(seam, memory, "humans", 10):
        assert await answered(asking(seam, SEED, {"tenant": "other"})) == NO_JSON
    assert sink.sent == []


async def test_answered_elsewhere_sends_a_note_when_asked_to(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    memory = MemoryAnswerer()
    async with (
        email_worker(backend, sink, notify_elsewhere=True),
        running(seam, memory, "console", 0),
    ):
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        offer = await memory.next_presented()
        await memory.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
        assert await answered(task) == NO_JSON
        note = (await sink.wait(2))[1]
        assert "This question was answered by memory: no answer is needed." in note.text()
        assert note.header("In-Reply-To") == question.header("Message-ID")


async def test_a_withdrawn_question_sends_a_note_when_asked_to(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink, notify_elsewhere=True):
        signal = asyncio.Event()
        task = asyncio.create_task(seam.ask(SEED, CALLER, scope=SOLO, signal=signal))
        (question,) = await sink.wait(1)
        signal.set()
        with pytest.raises(AskError):
            await asyncio.wait_for(task, 10)
        note = (await sink.wait(2))[1]
        assert (
            "This question was withdrawn (the caller withdrew the question): no answer is needed."
            in note.text()
        )
        assert note.header("In-Reply-To") == question.header("Message-ID")


# --- agent text is data ----------------------------------------------------------------

HOSTILE: dict[str, Any] = {
    "id": "deploy",
    "header": "Go\r\nBcc: x@evil",
    "question": 'Deploy?\r\nBcc: evil@evil.example <script>alert(1)</script> <img src="http://evil.example/t.png">',
    "options": [
        {"label": "<b>Yes</b>", "description": "<a href='http://evil.example'>click</a>"},
        {"label": "No\u202e"},
    ],
}


async def test_agent_text_cannot_add_headers_or_markup(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, [HOSTILE])
        (question,) = await sink.wait(1)
        assert question.message.get_all("Bcc") is None
        assert question.rcpt_tos == (ALICE,)
        assert "\\r\\nBcc" in question.header("Subject")
        html = question.html()
        assert "<script>" not in html and "<img" not in html and "<b>Yes" not in html
        assert "&lt;script&gt;" in html and "&lt;b&gt;Yes&lt;/b&gt;" in html
        assert 'src="' not in html and "href='" not in html  # nothing loaded, no agent link
        assert "\u202e" not in question.text() and "\\u202e" in question.text()
        await submit(port(email), reply_to(question, "<b>Yes</b>"))
        assert await answered(task) == '{"answers":[{"id":"deploy","selected":["<b>Yes</b>"]}]}'


# --- the HTTP endpoint -----------------------------------------------------------------

INBOUND = "an-inbound-secret-for-tests"


async def post(email: EmailAnswerer, body: bytes, secret: str = INBOUND) -> tuple[int, Any]:
    assert email.http is not None and email.http.port is not None
    url = f"http://127.0.0.1:{email.http.port}/email/inbound"
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "message/rfc822"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as r,
    ):
        return r.status, (await r.json() if r.status == 200 else await r.text())


async def test_the_http_endpoint_takes_raw_mime_with_the_secret(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink, inbound_secret=INBOUND) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        reply = reply_to(question, "1").as_bytes()
        status, _ = await post(email, reply, secret="wrong-secret-of-some-length")
        assert status == 401
        forged = reply.replace(ALICE.encode(), MALLORY.encode())
        assert await post(email, forged) == (200, {"outcome": "refused", "detail": ANY_DETAIL})
        assert await still_pending(seam, request_id_of(question))
        status, body = await post(email, reply)
        assert (status, body["outcome"]) == (200, "recorded")
        assert await answered(task) == YES_JSON
        status, body = await post(email, reply)  # the provider posts it again
        assert (status, body["outcome"]) == (200, "ignored")
        assert (await post(email, b"x" * 1_100_000))[0] == 413
        assert (await post(email, b"  "))[0] == 400


class _Any:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)


ANY_DETAIL: Any = _Any()


# --- links -------------------------------------------------------------------------------


async def test_links_are_signed_per_recipient_and_option(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    base = "https://askq.example.com"
    async with email_worker(backend, sink, link_base_url=base) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        tokens = re.findall(re.escape(base) + r"/a/([A-Za-z0-9_.-]+)", question.html())
        assert len(tokens) == 3  # one per option, and the page
        links, store = SignedLinks([SECRET]), email.group.store
        claims = [await links.resolve(token, group="email", store=store) for token in tokens]
        assert {c.recipient for c in claims} == {ALICE}
        assert {c.request_id for c in claims} == {request_id_of(question)}
        assert [c.option for c in claims] == [
            "Yes, delete them (Recommended)",
            "No, keep them",
            None,
        ]
        assert all(token in question.text() for token in tokens)  # the same links, once each
        task.cancel()


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    return found.group(1)


async def test_a_link_confirmed_answers_once_and_a_late_reply_is_told(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """The email's link, served by the email worker's own HTTP endpoint (the web
    channel's signed-link pages): GET and HEAD change nothing, POST answers once."""
    async with email_worker(backend, sink, link_base_url="http://mail.askq.example") as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        found = re.search(r"/a/([A-Za-z0-9_.-]+)\"[^>]*>No, keep them<", question.html())
        assert found is not None and email.http is not None
        path = f"/a/{found.group(1)}"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{email.http.port}") as client:
            for _ in range(2):  # a mail scanner prefetching, then the person
                page = await client.get(path)
                assert page.status_code == 200 and (await client.head(path)).status_code == 200
            assert re.search(r'value="opt1" checked', page.text)
            assert await still_pending(seam, request_id_of(question))
            done = await client.post(path, data={"csrf": csrf(page.text), "q0": "opt1"})
            assert done.status_code == 200, done.text
            assert await answered(task) == NO_JSON
            again = await client.post(path, data={"csrf": csrf(page.text), "q0": "opt0"})
            assert again.status_code == 410
        settlement = await seam.settlement(request_id_of(question))
        assert settlement is not None and settlement.by == f"email-link:{ALICE}"
        await submit(port(email), reply_to(question, "1"))
        late = (await sink.wait(2))[1]
        assert re.search(
            rf"Already answered through a link in an email by {ALICE} at \d{{4}}-", late.text()
        )


async def test_a_reply_bigger_than_the_limit_is_refused(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink, max_message_bytes=20_000) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        big = reply_to(question, "1\n" + "x" * 30_000)
        with pytest.raises(smtplib.SMTPException):
            await submit(port(email), big)
        assert await still_pending(seam, request_id_of(question))
        task.cancel()


# --- DKIM --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dkim_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """A throwaway RSA key (openssl, PKCS#1 as dkimpy reads it) and its DNS record."""
    folder = tmp_path_factory.mktemp("dkim")
    key = folder / "key.pem"
    subprocess.run(
        ["openssl", "genrsa", "-traditional", "-out", str(key), "1024"],
        check=True,
        capture_output=True,
    )
    public = subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    return key.read_bytes(), b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)


def signed(message: Any, key: bytes, domain: str) -> bytes:
    raw = message.as_bytes(policy=policy.SMTP)
    headers = [b"from", b"to", b"subject", b"message-id"]
    return bytes(dkim.sign(raw, b"sel", domain.encode(), key, include_headers=headers)) + raw


async def test_with_dkim_required_only_a_signed_reply_counts(
    backend: Backend, seam: Seam, sink: SmtpSink, dkim_key: tuple[bytes, bytes]
) -> None:
    key, record = dkim_key
    dns = {b"sel._domainkey.acme.example.": record, b"sel._domainkey.evil.example.": record}

    def txt(name: bytes, timeout: float = 5) -> bytes | None:  # the local DNS stand-in
        return dns.get(name)

    async with email_worker(
        backend, sink, require_dkim=True, dkim=dkim_check(txt), inbound_secret=INBOUND
    ) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        reply = reply_to(question, "1")
        to = [str(reply["To"])]
        assert await refused(email, reply) == 550  # unsigned
        status, body = await post(email, reply.as_bytes(policy=policy.SMTP))
        assert (status, body["outcome"]) == (200, "refused")  # at the HTTP endpoint too
        assert await refused(email, signed(reply, key, "evil.example"), rcpt_to=to) == 550
        tampered = signed(reply, key, "acme.example").replace(b"\r\n1\r\n", b"\r\n2\r\n", 1)
        assert await refused(email, tampered, rcpt_to=to) == 550
        assert await still_pending(seam, request_id_of(question))
        await submit(port(email), signed(reply, key, "acme.example"), rcpt_to=to)
        assert await answered(task) == YES_JSON


# --- a second, independent SMTP client ---------------------------------------------------


def swaks(
    port: int, raw: bytes, *, mail_from: str, rcpt_to: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "swaks",
            "--server",
            f"127.0.0.1:{port}",
            "--from",
            mail_from,
            "--to",
            rcpt_to,
            "--data",
            "-",
            "--timeout",
            "10",
            "--suppress-data",
        ],
        input=raw.decode(),
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_replies_submitted_with_swaks(backend: Backend, seam: Seam, sink: SmtpSink) -> None:
    """swaks (Debian's package; .ci/run installs it) speaks SMTP its own way: the
    listener takes its reply, and refuses its forgery."""
    async with email_worker(backend, sink, inbound_secret=None) as email:
        task = asking(seam, [LANGS])
        (question,) = await sink.wait(1)
        reply = reply_to(question, "2, 3")
        raw, to = reply.as_bytes(policy=policy.SMTP), str(reply["To"])
        forged = raw.replace(ALICE.encode(), MALLORY.encode())
        out = await asyncio.to_thread(swaks, port(email), forged, mail_from=MALLORY, rcpt_to=to)
        assert out.returncode != 0 and "550 5.7.1" in out.stdout, out.stdout
        out = await asyncio.to_thread(swaks, port(email), raw, mail_from=ALICE, rcpt_to=to)
        assert out.returncode == 0, out.stdout + out.stderr
        assert await answered(task) == (
            '{"answers":[{"id":"langs","selected":["Go","Rust (Recommended)"]}]}'
        )


# --- STARTTLS on the listener; a reply to a withdrawn question ---------------------------


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def tls_submit(port: int, raw: bytes, rcpt_to: str) -> tuple[bool, bool]:
    """Submit over STARTTLS; (offered before, TLS in use)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a self-signed test certificate
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.ehlo()
        offered = client.has_extn("starttls")
        client.starttls(context=context)
        client.ehlo()
        client.sendmail(ALICE, [rcpt_to], raw)
        return offered, client.sock is not None and isinstance(client.sock, ssl.SSLSocket)


async def test_the_listener_offers_starttls_with_a_certificate(
    backend: Backend, seam: Seam, sink: SmtpSink, tls_files: tuple[str, str]
) -> None:
    cert, key = tls_files
    async with email_worker(backend, sink, tls_cert=cert, tls_key=key) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        reply = reply_to(question, "1")
        raw = reply.as_bytes(policy=policy.SMTP)
        offered, encrypted = await asyncio.to_thread(tls_submit, port(email), raw, str(reply["To"]))
        assert offered and encrypted
        assert await answered(task) == YES_JSON


async def test_a_reply_to_a_withdrawn_question_is_told_so(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        signal = asyncio.Event()
        task = asyncio.create_task(seam.ask(SEED, CALLER, scope=SOLO, signal=signal))
        (question,) = await sink.wait(1)
        signal.set()  # the agent withdraws it (its turn's signal)
        with pytest.raises(AskError):
            await asyncio.wait_for(task, 10)
        await submit(port(email), reply_to(question, "1"))
        told = (await sink.wait(2))[1]
        assert (
            "This question was cancelled (the caller withdrew the question):"
            " your reply was not recorded." in told.text()
        )
        settlement = await seam.settlement(request_id_of(question))
        assert settlement is not None and settlement.state == "CANCELLED"
