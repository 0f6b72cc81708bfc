"""The messaging endpoint: the Bot Connector service POSTs every activity for the bot
here (`/api/messages`, the URL of the Azure bot registration).

A request is authenticated first (`_auth`: the Bot Framework JWT; 401 without a valid
one), then its tenant checked against the allowlist (403), then parsed with the Teams
SDK's activity models (400 saying what is wrong). A card's click (`adaptiveCard/action`)
is answered with the invoke response the handler gives (a card for the clicker); an
installation, a conversation update or a message is recorded (the conversation
references proactive messages need) and answered 200. Nothing a client sends can stop
the endpoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from microsoft_teams.api import ActivityTypeAdapter
from microsoft_teams.api.activities.invoke.adaptive_card.action import AdaptiveCardInvokeActivity
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from askq import visible

from .._serving import Endpoint as Serving
from ._auth import BotTokens, Unauthenticated

log = logging.getLogger("askq.teams")

MESSAGING_PATH = "/api/messages"
MAX_BODY = 1 << 20  # an activity is a few KB; a card click with every input well under this
RECORDED = frozenset({"installationUpdate", "conversationUpdate", "message"})

OnAction = Callable[[AdaptiveCardInvokeActivity], Awaitable[dict[str, Any]]]
OnActivity = Callable[[Any], Awaitable[None]]


def _for_the_model(activity: dict[str, Any]) -> dict[str, Any]:
    """The activity as the Teams SDK's models take it. Their `AdaptiveCardInvokeValue`
    allows only `trigger: "manual"`, while Teams sends `"automatic"` for a card's
    refresh (Universal Actions): the trigger is left out (askq reads the verb)."""
    value = activity.get("value")
    if activity.get("type") == "invoke" and isinstance(value, dict) and "trigger" in value:
        return {**activity, "value": {k: v for k, v in value.items() if k != "trigger"}}
    return activity


def _tenant(activity: dict[str, Any]) -> str | None:
    conversation = activity.get("conversation")
    tenant = conversation.get("tenantId") if isinstance(conversation, dict) else None
    if not tenant:
        channel_data = activity.get("channelData")
        found = channel_data.get("tenant") if isinstance(channel_data, dict) else None
        tenant = found.get("id") if isinstance(found, dict) else None
    return tenant if isinstance(tenant, str) else None


class Endpoint(Serving):
    log = log
    path = MESSAGING_PATH
    settings = "ASKQ_TEAMS_HTTP_HOST/ASKQ_TEAMS_HTTP_PORT"
    title = "Teams messaging endpoint"

    def __init__(
        self,
        tokens: BotTokens,
        tenant_allowed: Callable[[str | None], bool],
        on_action: OnAction,
        on_activity: OnActivity,
        host: str,
        port: int,
    ) -> None:
        super().__init__(host, port)
        self._tokens = tokens
        self._tenant_allowed = tenant_allowed
        self._on_action = on_action
        self._on_activity = on_activity

    async def _on_post(self, request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_BODY:
            return PlainTextResponse("activity too large", status_code=413)
        try:
            raw = json.loads(body)
        except ValueError:
            return PlainTextResponse("not a JSON activity", status_code=400)
        if not isinstance(raw, dict):
            return PlainTextResponse("not a JSON activity", status_code=400)
        try:
            await self._tokens.check(request.headers.get("Authorization"), raw)
        except Unauthenticated as exc:
            peer = request.client.host if request.client else "?"
            log.warning("Teams activity from %s refused: %s", peer, exc)
            return PlainTextResponse("unauthorized", status_code=401)
        tenant = _tenant(raw)
        if not self._tenant_allowed(tenant):
            log.warning("Teams activity of tenant %s refused: not allowed", visible(str(tenant)))
            return PlainTextResponse("tenant not allowed", status_code=403)
        try:
            activity = ActivityTypeAdapter.validate_python(_for_the_model(raw))
        except ValidationError as exc:
            problem = exc.errors()[0] if exc.errors() else {"msg": str(exc)}
            where = ".".join(str(part) for part in problem.get("loc", ()))
            log.warning("malformed Teams activity: %s %s", where, problem.get("msg"))
            return PlainTextResponse(
                f"malformed activity: {where}: {problem.get('msg')}", status_code=400
            )
        if isinstance(activity, AdaptiveCardInvokeActivity):
            return JSONResponse(await self._on_action(activity))
        if activity.type in RECORDED:
            try:
                await self._on_activity(activity)
            except Exception:  # noqa: BLE001 - a record not kept is logged, not fatal
                log.exception("recording a Teams %s failed", activity.type)
        return Response(status_code=200)
