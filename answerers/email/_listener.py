"""The SMTP listener for replies (aiosmtpd), on the worker's own event loop.

Point the reply domain's MX at it (or relay to it). It takes mail only for our return
addresses (any other recipient: 550 at RCPT, so it is no relay and sends no
backscatter), at most `ASKQ_EMAIL_MAX_MESSAGE_BYTES` (552 beyond), offers STARTTLS
when a certificate is configured, and hands each message to the channel
(`EmailAnswerer.receive`, which checks DKIM first when required). A refused reply gets
a 5xx (its sender's server tells them); a failure of ours a 451, so the sending server
tries again later.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session

from askq import AskError, ErrorCode

from ._addresses import ReplyAddresses
from ._inbox import Received

log = logging.getLogger("askq.email")

# (raw message, envelope sender, envelope recipients) -> what became of it.
Receive = Callable[[bytes, str | None, tuple[str, ...]], Awaitable[Received]]
# raw message -> None when its DKIM signature is valid and aligned, else why not.
DkimCheck = Callable[[bytes], Awaitable[str | None]]


class ReplyHandler:
    def __init__(self, addresses: ReplyAddresses, receive: Receive) -> None:
        self.addresses = addresses
        self.receive = receive

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if self.addresses.parse(address) is None:
            return "550 5.1.1 no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        raw = envelope.original_content or envelope.content
        if not isinstance(raw, bytes):
            raw = str(raw or "").encode("utf-8", "surrogateescape")
        try:
            received = await self.receive(raw, envelope.mail_from or "", tuple(envelope.rcpt_tos))
        except Exception:  # noqa: BLE001 - never lose a reply: the sender retries on 4xx
            log.exception("could not handle a reply from %s", envelope.mail_from)
            return "451 4.3.0 temporary failure, try again later"
        return received.smtp_reply


class SmtpListener:
    def __init__(
        self,
        handler: ReplyHandler,
        host: str,
        port: int,
        *,
        max_bytes: int,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self._port = port
        self.max_bytes = max_bytes
        self.tls_context = tls_context
        self._server: asyncio.base_events.Server | None = None
        self.port: int | None = None

    def _protocol(self) -> SMTP:
        kwargs: dict[str, Any] = {}
        if self.tls_context is not None:
            kwargs["tls_context"] = self.tls_context
        return SMTP(
            self.handler,
            data_size_limit=self.max_bytes,
            enable_SMTPUTF8=True,
            # A name, so aiosmtpd does not look up the host's FQDN (a DNS query) per connection.
            hostname=self.host if self.host not in ("0.0.0.0", "::", "") else "askq",
            ident="askq",
            loop=asyncio.get_running_loop(),
            **kwargs,
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(self._protocol, self.host, self._port)
        except OSError as exc:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_EMAIL_LISTEN_HOST/ASKQ_EMAIL_LISTEN_PORT: cannot listen on"
                f" {self.host}:{self._port} ({exc.strerror or exc})",
            ) from None
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("email reply listener on smtp://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
