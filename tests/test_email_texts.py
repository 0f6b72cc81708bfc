"""The email channel's texts as the person reads them: each mail parsed from the bytes
the SMTP sink (aiosmtpd) received, its preview (the first line), its links, both parts;
and the replies a person writes to them (the whole mail quoted below), read back."""

from __future__ import annotations

import asyncio
import re
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from html import escape

from conftest import SEED, Backend, running, sweeping
from email_standin import (
    ALICE,
    BOB,
    Sent,
    SmtpSink,
    email_settings,
    reply_to,
    sink,
    submit,
)
from test_email import ACME, NO_JSON, answered, asking, email_worker, port, request_id_of

from askq import Seam
from askq.answerers.email import REPLY_ABOVE, EmailAnswerer
from askq.answerers.email._mime import html_text
from askq.answerers.memory import MemoryAnswerer

__all__ = ["sink"]  # the fixture, imported so pytest finds it

QUESTION = SEED["questions"][0]
LABELS = [o["label"] for o in QUESTION["options"]]
BASE = "https://askq.example.com"
# A short link: the base, "/a/", 32 characters (an id and its tag).
SHORT_LINK = re.compile(re.escape(BASE) + r"/a/[A-Za-z0-9_-]{32}(?![A-Za-z0-9_.-])")


def arrived(sent: Sent) -> tuple[str, str]:
    """The text and HTML parts of a mail, parsed again from the bytes that arrived."""
    message = BytesParser(policy=policy.default).parsebytes(sent.raw)
    assert isinstance(message, EmailMessage)
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    return str(text.get_content()), str(html.get_content())


def shown_lines(html: str) -> list[str]:
    """The lines of text an HTML part shows, in order."""
    return [line for line in html_text(html).splitlines() if line.strip()]


async def test_the_question_mail_opens_with_the_question_and_carries_short_links(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink, link_base_url=BASE):
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        text, html = arrived(question)
        lines = text.splitlines()
        # The preview (an inbox shows the first words) is the question, not the marker.
        assert lines[0] == QUESTION["question"]
        assert lines[1] == REPLY_ABOVE
        assert shown_lines(html)[:2] == [QUESTION["question"], REPLY_ABOVE]
        # The links are short: three in each part (an option each, and the page).
        urls = re.findall(r"https?://\S+", text)
        assert len(urls) == 3 and all(SHORT_LINK.fullmatch(u) for u in urls), urls
        assert max(len(line) for line in lines) < 100
        hrefs = re.findall(r'href="([^"]+)"', html)
        assert sorted(hrefs) == sorted(urls)
        # The HTML lists each option once (its label the button of its link).
        for label in LABELS:
            assert html.count(escape(label)) == 1, label
            assert text.count(label) == 1, label
        # Nothing a person cannot use: no request id, no turn id.
        request_id = request_id_of(question)
        for part in (text, html):
            assert request_id not in part and "turn-1" not in part
        task.cancel()


async def test_a_reply_quoting_the_whole_mail_reads_only_the_persons_words(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """Own words (the whole text counts, not just a first line), written above the
    quoted mail: the lead line and marker of the quote are not taken for part of them."""
    async with email_worker(backend, sink, link_base_url=BASE) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        words = "Keep the newest one.\nDelete the rest."
        await submit(port(email), reply_to(question, words, html=False))
        answers = await asyncio.wait_for(task, 10)
        assert answers.answers[0].custom == words


async def test_unreadable_feedback_opens_with_why_and_a_reply_to_it_answers(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    async with email_worker(backend, sink) as email:
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        await submit(port(email), reply_to(question, "1, 2"))
        told = (await sink.wait(2))[1]
        text, html = arrived(told)
        why = (
            "I could not read your answer: this question takes one option only, and your"
            " reply chose 1 and 2."
        )
        first, second = text.splitlines()[:2]
        assert why.startswith(first.rstrip("…")) and second == REPLY_ABOVE
        assert why in " ".join(text.split())
        assert "not 2" not in text
        assert shown_lines(html)[:2] == [why, REPLY_ABOVE]  # whole: HTML is not re-wrapped
        words = "Neither: wait for the release."
        await submit(port(email), reply_to(told, words, html=False))
        assert (await asyncio.wait_for(task, 10)).answers[0].custom == words


ONE_ANSWERS = (
    '{"tenant=acme": {"to": ["alice@acme.example", "bob@acme.example"],'
    ' "allow": ["alice@acme.example"]}}'
)


async def test_a_copied_recipient_is_told_they_cannot_answer_and_is_not_reminded(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """Bob is sent the question for information (the route lets only Alice answer): his
    mail says so, asks for no reply, carries no link, and no reminder follows it."""
    settings = email_settings(sink, routes=ONE_ANSWERS, link_base_url=BASE)
    async with backend.seam() as worker_seam, sweeping(backend):
        answerer = EmailAnswerer(settings=settings)
        async with running(worker_seam, answerer, "email", 0, remind_after=0.5):
            task = asking(seam, SEED, ACME)
            mails = {m.rcpt_tos[0]: m for m in await sink.wait(2)}
            bob_text, bob_html = arrived(mails[BOB])
            assert bob_text.splitlines()[0] == QUESTION["question"]
            assert "for your information only: a reply from you is not recorded" in bob_text
            for part in (bob_text, bob_html):
                assert "Reply with" not in part and REPLY_ABOVE not in part
                assert "/a/" not in part and "browser" not in part
            alice_text, _ = arrived(mails[ALICE])
            assert "Reply with 1 or 2" in alice_text and SHORT_LINK.search(alice_text)
            reminder = (await sink.wait(3, timeout=15))[2]
            assert reminder.rcpt_tos == (ALICE,)
            await sink.settle(1.5)  # the next reminders are due: none is Bob's
            assert [m for m in sink.sent[2:] if BOB in m.rcpt_tos] == []
            await submit(port(answerer), reply_to(mails[ALICE], "2"))
            assert await answered(task) == NO_JSON


async def test_who_answered_elsewhere_is_written_as_a_person_reads_it(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    slack = MemoryAnswerer(by="slack:U0BOB (bob)")
    async with (
        email_worker(backend, sink, notify_elsewhere=True) as email,
        running(seam, slack, "slack", 0),
    ):
        task = asking(seam, SEED)
        (question,) = await sink.wait(1)
        offer = await slack.next_presented()
        await slack.answer(offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}])
        assert await answered(task) == NO_JSON
        note = (await sink.wait(2))[1]
        assert arrived(note)[0].splitlines()[0] == (
            "This question was answered in Slack by bob: no answer is needed."
        )
        await submit(port(email), reply_to(question, "1"))
        late = arrived((await sink.wait(3))[2])[0]
        assert re.match(r"Already answered in Slack by bob at \d{4}-\d\d-\d\d \d\d:\d\d UTC", late)
        for text in (arrived(note)[0], late):
            assert "slack:" not in text and "U0BOB" not in text
