"""The email group's HTTP endpoint: `POST /email/inbound` takes one raw MIME message
(for providers' inbound webhooks and relays that post mail rather than speak SMTP),
authenticated by a shared secret (`Authorization: Bearer <ASKQ_EMAIL_INBOUND_SECRET>`),
and the answer links' pages when the web routes are mounted on it.

The envelope, when the poster knows it, comes in `X-Askq-Mail-From` and
`X-Askq-Rcpt-To` (comma-separated); without it the message's own headers say where it
went. Replies: 200 with `{"outcome": ..., "detail": ...}` for every message read to the
end, refusals included (retrying them would not change them); 401 a wrong secret; 400
not a message; 413 too large; 503 a failure of ours (retry later).
"""

from __future__ import annotations

import hmac
import logging
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

from askq import AskError, ErrorCode

from ._inbox import Received
from ._mime import Inbound, parse

log = logging.getLogger("askq.email")

INBOUND_PATH = "/email/inbound"
HEALTH_PATH = "/healthz"

Receive = Callable[[Inbound], Awaitable[Received]]
Mount = Callable[[web.Application], None]


class HttpEndpoint:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        receive: Receive,
        secret: str | None,
        max_bytes: int,
        mounts: tuple[Mount, ...] = (),
    ) -> None:
        self.host = host
        self._port = port
        self.receive = receive
        self.secret = secret
        self.max_bytes = max_bytes
        self.mounts = mounts
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_bytes)
        if self.secret:
            app.router.add_post(INBOUND_PATH, self._on_inbound)
        app.router.add_get(HEALTH_PATH, self._on_health)
        for mount in self.mounts:
            mount(app)
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._port))
        except OSError as exc:
            sock.close()
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_EMAIL_HTTP_HOST/ASKQ_EMAIL_HTTP_PORT: cannot listen on"
                f" {self.host}:{self._port} ({exc.strerror or exc})",
            ) from None
        self.port = int(sock.getsockname()[1])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        log.info("email HTTP endpoint on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _authorized(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {self.secret}"
        return hmac.compare_digest(given.encode(), expected.encode())

    async def _on_inbound(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            log.warning("inbound mail POST from %s refused: bad secret", request.remote)
            return web.Response(status=401, text="missing or wrong bearer secret")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text=f"larger than {self.max_bytes} bytes")
        if not raw.strip():
            return web.Response(status=400, text="the body must be one raw MIME message")
        mail_from = request.headers.get("X-Askq-Mail-From")
        rcpt = request.headers.get("X-Askq-Rcpt-To", "")
        rcpt_tos = tuple(a.strip() for a in rcpt.split(",") if a.strip())
        try:
            received = await self.receive(parse(raw, mail_from=mail_from, rcpt_tos=rcpt_tos))
        except Exception:  # noqa: BLE001 - the poster retries on 5xx
            log.exception("could not handle an inbound message")
            return web.Response(status=503, text="temporary failure, try again later")
        return web.json_response({"outcome": received.verdict.value, "detail": received.detail})

    async def _on_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")
