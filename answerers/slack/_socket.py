"""Socket Mode: Slack pushes interactions over a WebSocket the worker opens, so it needs
no public URL. Every envelope is acknowledged first (Slack shows the human an error
after three seconds), then handled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from askq import AskError, ErrorCode

from ._api import slack_error
from ._interactions import Interaction, MalformedInteraction, parse_interaction

log = logging.getLogger("askq.slack")

CONNECT_TIMEOUT = 30.0


class SocketReceiver:
    def __init__(
        self,
        app_token: str,
        web_client: AsyncWebClient,
        dispatch: Callable[[Interaction], None],
        ping_interval: float = 5.0,
    ) -> None:
        self._app_token = app_token
        self._web_client = web_client  # only for apps.connections.open (the wss URL)
        self._dispatch = dispatch
        self._ping_interval = ping_interval
        self._client: SocketModeClient | None = None

    async def start(self) -> None:
        client = self._client = SocketModeClient(
            app_token=self._app_token,
            web_client=self._web_client,
            auto_reconnect_enabled=True,
            ping_interval=self._ping_interval,
            logger=logging.getLogger("askq.slack.socket"),
        )
        client.socket_mode_request_listeners.append(self._on_request)
        # Ask for the URL here, not inside connect(): connect() retries a refused token
        # forever, and a worker with a bad token must stop at start-up, saying why.
        try:
            client.wss_uri = await client.issue_new_wss_url()
        except SlackApiError as exc:
            error = slack_error(exc)
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_SLACK_APP_TOKEN: Slack refused to open a Socket Mode connection ({error})",
            ) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AskError(
                ErrorCode.INTERNAL,
                f"cannot reach Slack at {self._web_client.base_url} for Socket Mode: {exc}",
            ) from None
        try:
            await asyncio.wait_for(client.connect(), CONNECT_TIMEOUT)  # type: ignore[no-untyped-call]
        except TimeoutError:
            raise AskError(
                ErrorCode.INTERNAL, f"Socket Mode connection not open after {CONNECT_TIMEOUT:g} s"
            ) from None

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()  # type: ignore[no-untyped-call]
            self._client = None

    async def _on_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type != "interactive":
            return  # events and commands are not ours; acknowledged so Slack stops resending
        try:
            interaction = parse_interaction(request.payload)
        except MalformedInteraction as exc:
            log.warning("malformed Slack interaction (Socket Mode): %s", exc)
            return
        if interaction is not None:
            self._dispatch(interaction)
