"""The interactions endpoint: Discord POSTs every interaction with the application here
(`/interactions`, the Interactions Endpoint URL of the application's General
Information page), so the bot needs no Gateway connection.

A request is verified first (`_verify`: Ed25519 over timestamp and body; 401 without a
valid, fresh signature), then parsed (400 saying what is wrong); a PING (type 1, what
Discord sends when the URL is saved and now and then) is answered with a PONG; a
component's or modal's interaction with the handler's response. Nothing a client sends
can stop the endpoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .._serving import Endpoint as Serving
from ._interactions import COMPONENT, MODAL_SUBMIT
from ._verify import SIGNATURE, TIMESTAMP, Unsigned, Verifier

log = logging.getLogger("askq.discord")

INTERACTIONS_PATH = "/interactions"
MAX_BODY = 1 << 20  # an interaction is a few KB
PING, PONG = 1, 1

OnInteraction = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Endpoint(Serving):
    log = log
    path = INTERACTIONS_PATH
    settings = "ASKQ_DISCORD_HTTP_HOST/ASKQ_DISCORD_HTTP_PORT"
    title = "Discord interactions endpoint"

    def __init__(
        self,
        verifier: Verifier,
        application_id: str,
        on_interaction: OnInteraction,
        host: str,
        port: int,
    ) -> None:
        super().__init__(host, port)
        self._verifier = verifier
        self._application_id = application_id
        self._on_interaction = on_interaction

    async def _on_post(self, request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_BODY:
            return PlainTextResponse("interaction too large", status_code=413)
        try:
            self._verifier.check(
                request.headers.get(SIGNATURE), request.headers.get(TIMESTAMP), body
            )
        except Unsigned as exc:
            peer = request.client.host if request.client else "?"
            log.warning("Discord interaction from %s refused: %s", peer, exc)
            return PlainTextResponse("invalid request signature", status_code=401)
        try:
            interaction = json.loads(body)
        except ValueError:
            return PlainTextResponse("not a JSON interaction", status_code=400)
        if not isinstance(interaction, dict) or not isinstance(interaction.get("type"), int):
            return PlainTextResponse("not an interaction: no type", status_code=400)
        if interaction.get("application_id") not in (None, self._application_id):
            # Signed with our key yet for another application: a key shared by mistake.
            return PlainTextResponse("another application's interaction", status_code=400)
        kind = interaction["type"]
        if kind == PING:
            return JSONResponse({"type": PONG})
        if kind in (COMPONENT, MODAL_SUBMIT):
            return JSONResponse(await self._on_interaction(interaction))
        # A slash command or autocomplete: askq registers none.
        return JSONResponse(
            {
                "type": 4,
                "data": {
                    "content": "askq answers only its own questions' buttons.",
                    "flags": 64,
                    "allowed_mentions": {"parse": []},
                },
            }
        )
