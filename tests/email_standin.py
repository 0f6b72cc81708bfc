"""The email answerer's test harness: an SMTP sink on loopback (aiosmtpd) that records
what the worker sends and can refuse it, the worker's settings pointed at it, and
replies as mail clients write them, submitted to the worker's listener with smtplib.
"""

from __future__ import annotations

import asyncio
import datetime
import html as html_text
import smtplib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime, make_msgid
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from askq.answerers.email import EmailSettings

ALICE = "alice@acme.example"
BOB = "bob@acme.example"
MALLORY = "mallory@evil.example"
DOMAIN = "askq.example"
SECRET = "a-test-secret-of-some-length"


@dataclass(frozen=True)
class Sent:
    mail_from: str
    rcpt_tos: tuple[str, ...]
    raw: bytes
    message: EmailMessage

    def header(self, name: str) -> str:
        return str(self.message.get(name, ""))

    def text(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        assert isinstance(part, EmailMessage)
        return str(part.get_content())

    def html(self) -> str:
        part = self.message.get_body(preferencelist=("html",))
        assert isinstance(part, EmailMessage)
        return str(part.get_content())


class SmtpSink:
    """The outbound server: records each message; `refuse_next(code)` refuses the next
    recipient with that reply (a 5xx for good, a 4xx for a while)."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._refusals: list[str] = []
        self._changed = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    def refuse_next(self, reply: str = "550 5.1.1 no such user") -> None:
        self._refusals.append(reply)

    async def handle_RCPT(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if self._refusals:
            return self._refusals.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        raw = envelope.original_content or b""
        message = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        self.sent.append(Sent(envelope.mail_from or "", tuple(envelope.rcpt_tos), raw, message))
        self._changed.set()
        return "250 OK"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SMTP(self, hostname="sink", loop=loop), "127.0.0.1", 0
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def wait(self, count: int = 1, timeout: float = 10.0) -> list[Sent]:
        """The first `count` messages, once they are in."""
        deadline = time.monotonic() + timeout
        while len(self.sent) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{len(self.sent)} of {count} messages arrived")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass
        return self.sent[:count]

    async def settle(self, seconds: float = 0.5) -> None:
        """Let queued sends run (for asserting that nothing more is sent)."""
        await asyncio.sleep(seconds)

    def to(self, address: str) -> list[Sent]:
        return [s for s in self.sent if address in s.rcpt_tos]


@pytest.fixture
async def sink() -> AsyncIterator[SmtpSink]:
    server = SmtpSink()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


ROUTES = (
    '{"tenant=acme": {"to": ["alice@acme.example", "bob@acme.example"]},'
    ' "tenant=solo": "alice@acme.example"}'
)


def email_settings(sink: SmtpSink, **extra: Any) -> EmailSettings:
    values: dict[str, Any] = {
        "routes": ROUTES,
        "from_address": f"askq@{DOMAIN}",
        "secret": SECRET,
        "smtp_host": "127.0.0.1",
        "smtp_port": sink.port,
        "smtp_starttls": False,
        "smtp_timeout": 5,
        "listen_host": "127.0.0.1",
        "listen_port": 0,
    }
    values.update(extra)
    return EmailSettings(**values)


def reply_to(
    question: Sent,
    text: str,
    *,
    sender: str | None = None,
    html: bool = True,
    quote: bool = True,
    headers: dict[str, str] | None = None,
) -> EmailMessage:
    """A reply as a mail client writes one: the person's words on top, a signature, the
    question quoted below ("On … wrote:" and `>` lines), and an HTML alternative with
    the quote in a blockquote."""
    sender = sender or question.rcpt_tos[0]
    original = question.text()
    reply = EmailMessage()
    reply["From"] = f"Alice Example <{sender}>"
    reply["To"] = question.header("Reply-To")
    reply["Subject"] = "Re: " + question.header("Subject")
    reply["Date"] = format_datetime(datetime.datetime.now().astimezone())
    reply["Message-ID"] = make_msgid(domain="acme.example")
    reply["In-Reply-To"] = question.header("Message-ID")
    reply["References"] = question.header("Message-ID")
    for name, value in (headers or {}).items():
        reply[name] = value
    quoted_text = "\n".join(f"> {line}" if line else ">" for line in original.splitlines())
    signature = "\n\nThanks,\nAlice\n-- \nAlice Example | ACME Corp | +1 555 0100\n"
    written = f"On Tue, Dec 1, 2026 at 2:00 PM askq <askq@{DOMAIN}> wrote:\n{quoted_text}\n"
    reply.set_content(text + signature + ("\n" + written if quote else ""))
    if html:
        body = "<br>".join(html_text.escape(line) for line in text.splitlines())
        reply.add_alternative(
            f'<div dir="ltr">{body}<br><br>Thanks,<br>Alice</div><br>'
            '<div class="gmail_quote"><div class="gmail_attr">On Tue, Dec 1, 2026 askq wrote:'
            f'</div><blockquote class="gmail_quote">{question.html()}</blockquote></div>',
            subtype="html",
        )
    return reply


def smtp_submit(
    port: int, message: EmailMessage | bytes, *, mail_from: str, rcpt_to: list[str]
) -> dict[str, Any]:
    """Submit with smtplib, as another server would (blocking: run it in a thread)."""
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        raw = message if isinstance(message, bytes) else message.as_bytes(policy=policy.SMTP)
        return dict(client.sendmail(mail_from, rcpt_to, raw))


async def submit(
    port: int,
    message: EmailMessage | bytes,
    *,
    mail_from: str = ALICE,
    rcpt_to: list[str] | None = None,
) -> None:
    """Submit a reply to the listener; raises smtplib's error when it is refused."""
    if rcpt_to is None:
        assert isinstance(message, EmailMessage)
        rcpt_to = [str(message["To"])]
    await asyncio.to_thread(smtp_submit, port, message, mail_from=mail_from, rcpt_to=rcpt_to)
