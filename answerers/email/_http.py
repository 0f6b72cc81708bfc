"""The email group's HTTP endpoint (Starlette on uvicorn): `POST /email/inbound` takes
one raw MIME message (providers' inbound webhooks, relays that post mail rather than
speak SMTP), authenticated by a shared secret (`Authorization: Bearer
<ASKQ_EMAIL_INBOUND_SECRET>`); and the answer links' pages (`/a/<token>`: the web
channel's signed-link routes, mounted for the email group) when links are on.

The envelope, when the poster knows it, comes in `X-Askq-Mail-From` and
`X-Askq-Rcpt-To` (comma-separated); without it the message's own headers say where it
went. Replies: 200 with `{"outcome": ..., "detail": ...}` for every message read to the
end, refusals included (posting them again would not change them); 401 a wrong
secret; 400 not a message; 413 too large; 503 a failure of ours (retry later).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from .._serving import AppServer, listening_socket
from ._inbox import Received

log = logging.getLogger("askq.email")

INBOUND_PATH = "/email/inbound"
HEALTH_PATH = "/healthz"

# (raw message, envelope sender, envelope recipients) -> what became of it.
Receive = Callable[[bytes, str | None, tuple[str, ...]], Awaitable[Received]]


class HttpEndpoint:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        receive: Receive,
        secret: str | None,
        max_bytes: int,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.host = host
        self._port = port
        self.receive = receive
        self.secret = secret
        self.max_bytes = max_bytes
        self.routes = list(routes)
        self._server: AppServer | None = None
        self.port: int | None = None

    def app(self) -> Starlette:
        routes: list[BaseRoute] = [Route(HEALTH_PATH, self._on_health, methods=["GET"])]
        if self.secret:
            routes.append(Route(INBOUND_PATH, self._on_inbound, methods=["POST"]))
        return Starlette(routes=[*routes, *self.routes])

    async def start(self) -> None:
        sock = listening_socket(self.host, self._port, "ASKQ_EMAIL_HTTP_HOST/ASKQ_EMAIL_HTTP_PORT")
        self.port = int(sock.getsockname()[1])
        self._server = AppServer(self.app(), sock, "the email HTTP endpoint")
        await self._server.start()
        log.info("email HTTP endpoint on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
        self._server = None

    def _authorized(self, request: Request) -> bool:
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {self.secret}"
        return hmac.compare_digest(given.encode(), expected.encode())

    async def _body(self, request: Request) -> bytes | None:
        """The body, or None once it is larger than allowed (read no further)."""
        declared = request.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return None
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_bytes:
                return None
        return bytes(body)

    async def _on_inbound(self, request: Request) -> Response:
        if not self._authorized(request):
            log.warning("inbound mail POST from %s refused: bad secret", request.client)
            return PlainTextResponse("missing or wrong bearer secret", status_code=401)
        raw = await self._body(request)
        if raw is None:
            return PlainTextResponse(f"larger than {self.max_bytes} bytes", status_code=413)
        if not raw.strip():
            return PlainTextResponse("the body must be one raw MIME message", status_code=400)
        mail_from = request.headers.get("X-Askq-Mail-From")
        rcpt = request.headers.get("X-Askq-Rcpt-To", "")
        rcpt_tos = tuple(a.strip() for a in rcpt.split(",") if a.strip())
        try:
            received = await self.receive(raw, mail_from, rcpt_tos)
        except Exception:  # noqa: BLE001 - the poster retries on 5xx
            log.exception("could not handle an inbound message")
            return PlainTextResponse("temporary failure, try again later", status_code=503)
        return JSONResponse({"outcome": received.verdict.value, "detail": received.detail})

    async def _on_health(self, request: Request) -> Response:
        return PlainTextResponse("ok")
