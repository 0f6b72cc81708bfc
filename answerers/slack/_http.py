"""The HTTP interactivity endpoint: Slack POSTs every click and modal submission here,
signed with the app's signing secret.

A request is checked (v0 signature: HMAC-SHA256 of `v0:<timestamp>:<body>`, and a
timestamp at most five minutes off, against replays), parsed, answered 200 at once —
Slack shows an error to the human after three seconds — and handled after the answer.
Forged or stale: 401. Not a payload we understand: 400 saying what is wrong. Nothing a
client sends can stop the endpoint.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from .._serving import listening_socket
from ._interactions import Interaction, MalformedInteraction, parse_form_body, parse_interaction

log = logging.getLogger("askq.slack")

INTERACTIVITY_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
REPLAY_WINDOW_SECONDS = 300


class HttpReceiver:
    def __init__(
        self,
        signing_secret: str,
        host: str,
        port: int,
        dispatch: Callable[[Interaction], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._verifier = SignatureVerifier(signing_secret)
        self._host = host
        self._port = port
        self._dispatch = dispatch
        self._clock = clock
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the bound port (useful with port 0)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(INTERACTIVITY_PATH, self._on_interaction)
        app.router.add_get(HEALTH_PATH, self._on_health)
        sock = listening_socket(self._host, self._port, "ASKQ_SLACK_HTTP_HOST/ASKQ_SLACK_HTTP_PORT")
        self.port = int(sock.getsockname()[1])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        log.info(
            "Slack interactivity endpoint on http://%s:%d%s",
            self._host,
            self.port,
            INTERACTIVITY_PATH,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _refusal(self, body: bytes, timestamp: str | None, signature: str | None) -> str | None:
        """Why the request is not Slack's (None: it is)."""
        if not timestamp or not signature:
            return "missing X-Slack-Request-Timestamp or X-Slack-Signature"
        try:
            sent = int(timestamp)
        except ValueError:
            return "malformed X-Slack-Request-Timestamp"
        if abs(self._clock() - sent) > REPLAY_WINDOW_SECONDS:
            return "stale request timestamp (more than 5 minutes off)"
        expected = self._verifier.generate_signature(timestamp=timestamp, body=body)
        if expected is None or not _same(expected, signature):
            return "invalid signature"
        return None

    async def _on_interaction(self, request: web.Request) -> web.Response:
        body = await request.read()
        refusal = self._refusal(
            body,
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
        )
        if refusal is not None:
            log.warning("Slack request from %s refused: %s", request.remote, refusal)
            return web.Response(status=401, text=refusal)
        try:
            interaction = parse_interaction(parse_form_body(body))
        except MalformedInteraction as exc:
            log.warning("malformed Slack interaction: %s", exc)
            return web.Response(status=400, text=f"malformed interaction: {exc}")
        if interaction is not None:
            self._dispatch(interaction)  # handled after this 200 goes out
        return web.Response(status=200)

    async def _on_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
