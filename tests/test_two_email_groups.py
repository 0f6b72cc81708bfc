"""Two email groups side by side on one Redis, each with its own reply domain, secret,
listener and recipients (issue 22, item 1): what one group sent, leased, reminded or
was told must never be read as the other's. Against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
import smtplib
from collections.abc import AsyncIterator
from email import policy
from email.message import EmailMessage
from typing import Any

import pytest
from conftest import SEED, YES_JSON, Backend, running, sweeping
from email_standin import ALICE, BOB, Sent, SmtpSink, email_settings, reply_to, sink, submit

from askq import Answers, Caller, RequestState, Seam
from askq.answerers.email import EmailAnswerer
from askq.answerers.email._state import EmailStore

__all__ = ["sink"]  # the fixture, imported so pytest finds it

NORA = "nora@acme.example"
CALLER = Caller(agent_id="agent-7", turn_id="turn-1")


def group_settings(sink: SmtpSink, domain: str, secret: str, to: list[str]) -> Any:
    return email_settings(
        sink,
        routes=json.dumps({"*": {"to": to}}),
        from_address=f"askq@{domain}",
        reply_domain=domain,
        secret=secret,
    )


@contextlib.asynccontextmanager
async def email_group(
    backend: Backend,
    sink: SmtpSink,
    group: str,
    priority: int,
    to: list[str],
    consumer: str | None = None,
    **timing: float,
) -> AsyncIterator[EmailAnswerer]:
    domain = f"{group}.example"
    async with backend.seam() as worker_seam:
        answerer = EmailAnswerer(
            settings=group_settings(sink, domain, f"secret-of-{group}-0123456789", to)
        )
        async with running(worker_seam, answerer, group, priority, consumer=consumer, **timing):
            yield answerer


def port(answerer: EmailAnswerer) -> int:
    assert answerer.listener is not None and answerer.listener.port is not None
    return answerer.listener.port


def from_group(group: str, sent: list[Sent], to: str) -> list[Sent]:
    """The messages `group` (its reply domain) mailed to `to`."""
    return [
        s
        for s in sent
        if s.rcpt_tos == (to,) and s.header("Reply-To").endswith(f"@{group}.example")
    ]


async def mail_from(sink: SmtpSink, group: str, to: str, count: int = 1) -> list[Sent]:
    async def arrived() -> list[Sent]:
        while len(found := from_group(group, sink.sent, to)) < count:
            await sink.wait(len(sink.sent) + 1, timeout=20)
        return found

    return await asyncio.wait_for(arrived(), 20)


def smtp_reply(port: int, message: EmailMessage, mail_from: str) -> tuple[int, str]:
    """Submit a reply and return the listener's answer to its DATA (code, text)."""
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.ehlo()
        client.mail(mail_from)
        client.rcpt(str(message["To"]))
        code, text = client.data(message.as_bytes(policy=policy.SMTP))
        return code, text.decode()


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


async def test_a_reminder_goes_only_to_the_groups_own_recipients(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """Groups `email` (alice) and `email-notes` (nora, reminds after a second) both take
    the question. Each reminds, and mails, only its own recipients: email-notes never
    mails alice (before: it read the shared record, which listed alice as sent to, and
    reminded her through its own relay and secret; her reply was refused everywhere)."""
    async with (
        sweeping(backend),
        email_group(backend, sink, "email", 0, [ALICE]) as email,
        email_group(backend, sink, "email-notes", 0, [NORA], remind_after=1.0),
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        (alices,) = await mail_from(sink, "email", ALICE)
        await mail_from(sink, "email-notes", NORA, 2)  # the question, then its reminder
        await sink.settle(0.5)
        assert from_group("email-notes", sink.sent, ALICE) == []
        assert [s.rcpt_tos for s in from_group("email", sink.sent, NORA)] == []
        # each group's record lists its own recipients only
        records = EmailStore(email.group.store)
        assert set(await records.deliveries(alices.header("X-Askq-Request"))) == {ALICE}
        # and alice's reply to her own mail answers
        await submit(port(email), reply_to(alices, "1"))
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON


async def test_an_escalation_mails_the_next_group_even_to_a_person_in_both(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """`email-first` (tier 30, alice, escalates after a second) passes the question on
    to `email-mgr` (tier 40, alice and bob). Alice gets email-mgr's mail too (before:
    the shared record said she had been mailed, so she never got it); her reply to the
    first mail is told, in words, that the question was passed on (and the listener
    does not say it is settled); her reply to the second answers the request."""
    async with (
        sweeping(backend),
        email_group(backend, sink, "email-first", 30, [ALICE], escalate_after=1.0) as first,
        email_group(backend, sink, "email-mgr", 40, [ALICE, BOB]) as mgr,
    ):
        task: asyncio.Task[Answers] = asyncio.create_task(seam.ask(SEED, CALLER))
        (tier30,) = await mail_from(sink, "email-first", ALICE)
        (tier40,) = await mail_from(sink, "email-mgr", ALICE)
        await mail_from(sink, "email-mgr", BOB)
        assert tier40.header("Message-ID") != tier30.header("Message-ID")
        request_id = tier30.header("X-Askq-Request")
        assert tier40.header("X-Askq-Request") == request_id

        # Alice answers the first mail, now that the question has moved on.
        code, text = await asyncio.to_thread(smtp_reply, port(first), reply_to(tier30, "2"), ALICE)
        assert code == 250 and "settled" not in text
        told = (await mail_from(sink, "email-first", ALICE, 2))[1]
        assert told.header("In-Reply-To")  # in her thread
        assert "passed on" in told.text()
        assert "your reply was not recorded" in told.text()
        assert "answered" not in told.text().split("\n", 1)[0].lower()
        assert await state_of(seam, request_id) is RequestState.CLAIMED  # still waiting

        # Her reply to email-mgr's mail answers it.
        await submit(port(mgr), reply_to(tier40, "1"))
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        settlement = await seam.settlement(request_id)
        assert settlement is not None and settlement.by == f"email:{ALICE}"


async def test_a_reply_address_of_one_group_does_not_answer_for_another(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """Two groups in one tier with the same secret and the same reply domain (so each
    listener takes the other's addresses): both mail alice, each its own message; a
    reply to one group's mail, arriving at the other's listener, is refused and records
    nothing, though both hold the request; at its own group's listener it answers."""
    shared = "one-secret-for-both-0123456789"
    async with backend.seam() as worker_seam:
        one = EmailAnswerer(settings=group_settings(sink, "shared.example", shared, [ALICE]))
        two = EmailAnswerer(settings=group_settings(sink, "shared.example", shared, [ALICE]))
        async with running(worker_seam, one, "one", 0), running(worker_seam, two, "two", 0):
            task = asyncio.create_task(seam.ask(SEED, CALLER))
            mails = await sink.wait(2)
            assert len({m.header("Reply-To") for m in mails}) == 2
            assert len({m.header("Message-ID") for m in mails}) == 2

            def minted_by(answerer: EmailAnswerer, mail: Sent) -> bool:
                address = answerer.config.addresses.parse(mail.header("Reply-To"))
                assert address is not None
                return answerer.config.addresses.verifies(address, ALICE)

            (ones,) = [m for m in mails if minted_by(one, m)]
            (twos,) = [m for m in mails if minted_by(two, m)]
            assert ones is not twos
            with pytest.raises(smtplib.SMTPDataError) as refused:
                await submit(port(two), reply_to(ones, "1"))
            assert refused.value.smtp_code == 550
            await sink.settle(0.3)
            assert len(sink.sent) == 2  # nothing told, nothing recorded
            assert await state_of(seam, ones.header("X-Askq-Request")) is RequestState.CLAIMED
            await submit(port(one), reply_to(ones, "1"))
            assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
            settlement = await seam.settlement(ones.header("X-Askq-Request"))
            assert settlement is not None and settlement.by == f"email:{ALICE}"


async def test_after_an_upgrade_the_only_email_group_does_not_mail_again(
    backend: Backend, seam: Seam, sink: SmtpSink
) -> None:
    """A question mailed by a version that kept records per kind (`{p}:email:msg:<id>`)
    and re-presented by the upgraded replica (same consumer: it re-reads its claims) is
    not mailed a second time: the only email group reads the old record as its own."""
    async with email_group(backend, sink, "email", 0, [ALICE], consumer="one") as email:
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        (question,) = await sink.wait(1)
        request_id = question.header("X-Askq-Request")
        records = EmailStore(email.group.store)
        async with asyncio.timeout(10):
            while await records.deliveries(request_id) != {ALICE: "sent"}:
                await asyncio.sleep(0.02)
        new_key = email.group.store.key(f"msg:{request_id}")
    client = backend.sync_client()
    try:  # as the older version would have recorded it
        client.rename(new_key, f"{seam.keys.base}:email:msg:{request_id}")
    finally:
        client.close()
    async with email_group(backend, sink, "email", 0, [ALICE], consumer="one") as email:
        await sink.settle(1.0)
        assert len(sink.sent) == 1
        await submit(port(email), reply_to(question, "1"))
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
