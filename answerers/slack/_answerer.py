"""The Slack channel: `askq worker slack`.

decide: a route for the request's scope, or decline (the waterfall moves on).
present: queue `post_question`, a retried send that posts the Block Kit message once.
A click (at any replica) answers through the seam, then `update_message` shows the
final state; `retract` (answered elsewhere, cancelled, escalated) does the same.
A question that cannot be posted is released, so the waterfall falls through.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from askq import (
    AnswererOptions,
    GroupHandle,
    Offer,
    Retraction,
    RetryLater,
)

from .._chat import ChatAnswerer, shown
from . import _blocks as blocks
from ._api import SlackRefused, call, check_bot_token, web_client
from ._clicks import ClickHandler
from ._config import SlackConfig, SlackSettings
from ._http import HttpReceiver
from ._interactions import Interaction
from ._socket import SocketReceiver
from ._state import SlackStore

log = logging.getLogger("askq.slack")

REMINDER_GAP_SECONDS = 60


class SlackOptions(AnswererOptions):
    """The Slack answerer has no flags of its own: it reads the ASKQ_SLACK_* settings
    (README, "Slack"), so every replica of a group is configured the same way."""


class SlackAnswerer(ChatAnswerer[SlackOptions]):
    kind = "slack"
    log = log
    who = "Slack"
    Options = SlackOptions
    uses_sends = True  # posts and updates are retried sends, run by any replica

    config: SlackConfig
    store: SlackStore
    client: AsyncWebClient
    clicks: ClickHandler

    def __init__(
        self, options: SlackOptions | None = None, *, settings: SlackSettings | None = None
    ) -> None:
        """`settings`: the ASKQ_SLACK_* settings (default: read from the environment at
        start-up)."""
        super().__init__(options)
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None
        self._receiver: HttpReceiver | SocketReceiver | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        settings = self._settings or SlackSettings.from_env()
        self.config = SlackConfig.from_settings(settings)  # CONFIG_ERROR before going live
        self.store = SlackStore(group.store)
        try:
            self._session = aiohttp.ClientSession()
            self.client = web_client(self.config.bot_token, self.config.api_url, self._session)
            await check_bot_token(self.client)
            self.clicks = ClickHandler(group, self.store, self.client, self.config.routes)
            if self.config.socket_mode:
                assert self.config.app_token is not None  # checked by SlackConfig
                api = web_client(None, self.config.api_url, self._session)
                self._receiver = SocketReceiver(self.config.app_token, api, self.dispatch)
            else:
                assert self.config.signing_secret is not None  # checked by SlackConfig
                self._receiver = HttpReceiver(
                    self.config.signing_secret,
                    self.config.http_host,
                    self.config.http_port,
                    self.dispatch,
                )
            await self._receiver.start()
        except BaseException:
            await self.stop()  # the runtime calls stop() only after a successful start
            raise

    async def stop(self) -> None:
        if self._receiver is not None:
            await self._receiver.stop()
            self._receiver = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def http_port(self) -> int | None:
        """The port the HTTP endpoint listens on (None in Socket Mode)."""
        return self._receiver.port if isinstance(self._receiver, HttpReceiver) else None

    def dispatch(self, interaction: Interaction) -> None:
        """Handle an acknowledged interaction in its own task."""
        task = asyncio.create_task(self.clicks.handle(interaction))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the runtime's side ------------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        return self.config.routes.match(offer.scope) is not None

    async def retract(self, retraction: Retraction) -> None:
        outcome = blocks.Outcome(
            retraction.state,
            code=retraction.code,
            by=retraction.by,
            why=retraction.why_cancelled,
        )
        await self.store.set_outcome(retraction.request_id, outcome, overwrite=False)
        await self.group.send("update_message", request_id=retraction.request_id)

    # --- sends (retried; each safe to run twice) ---------------------------------------

    async def post_question(self, request_id: str) -> None:
        """Post the question once, however often this runs and at whichever replica."""
        posted = await self.store.message(request_id)
        if posted.ts is not None or posted.outcome is not None:
            return  # posted already, or settled before it was shown
        if not await self.group.holds(request_id):
            log.info("request %s is no longer this group's; not posting it", request_id)
            return
        request = await self.group.request(request_id)
        route = self.config.routes.match(request.scope)
        if route is None:  # the routes changed under a recovered claim
            await self._give_back(request_id, "no route for its scope any more")
            return
        if not await self.store.lease_post(request_id):
            # Another run is posting it; look again once its lease is over.
            raise RetryLater(
                await self.group.store.lease_left(request_id), "being posted elsewhere"
            )
        browser = self.config.browser
        open_url = browser.url(request.id, route) if browser is not None else None
        try:
            response = await call(
                "chat.postMessage",
                self.client.chat_postMessage(
                    channel=route.channel,
                    text=blocks.fallback_text(request.questions),
                    blocks=blocks.question_message(
                        request.id,
                        request.questions,
                        request.caller,
                        open_url,
                        group=self.group.name,
                    ),
                    unfurl_links=False,
                    unfurl_media=False,
                ),
            )
        except SlackRefused as exc:
            await self.group.store.drop_lease(request_id)
            await self._give_back(request_id, f"Slack refused to post to {route.channel}: {exc}")
            return
        except BaseException:
            await self.group.store.drop_lease(request_id)
            raise
        await self.store.record_post(request_id, str(response["channel"]), str(response["ts"]))
        await self.update_message(request_id)  # a no-op unless it settled while we posted

    async def update_message(self, request_id: str) -> None:
        """Show what became of the request; a no-op until it is posted and settled."""
        posted = await self.store.message(request_id)
        if posted.ts is None or posted.channel is None or posted.outcome is None:
            return
        final = await self._final(request_id, posted.outcome)
        if final is None:
            return  # expired: nothing left to show
        outcome, request = final
        # The click's update and the post's own (when the click beat the post's
        # bookkeeping) may both run; Slack counts each chat.update against its limit.
        marker = shown(request_id, outcome)
        if not await self.group.store.once(marker, self.store.ttl):
            return  # another run of this update showed it already
        try:
            await call(
                "chat.update",
                self.client.chat_update(
                    channel=posted.channel,
                    ts=posted.ts,
                    text=blocks.final_text(request.questions, outcome),
                    blocks=blocks.final_message(request.questions, outcome, request.caller),
                ),
            )
        except SlackRefused as exc:  # a deleted message, an archived channel: moot
            log.warning("could not update the message of %s: %s", request_id, exc)
        except BaseException:
            await self.group.store.forget_once(marker)  # to be retried
            raise

    async def post_reminder(self, request_id: str) -> None:
        """Nudge the humans in the question's thread (at most one a minute per request,
        so a retried or doubled job does not nudge twice)."""
        posted = await self.store.message(request_id)
        if posted.ts is None or posted.channel is None or posted.outcome is not None:
            return
        if not await self.group.store.once(f"remind:{request_id}", REMINDER_GAP_SECONDS):
            return
        try:
            await call(
                "chat.postMessage",
                self.client.chat_postMessage(
                    channel=posted.channel,
                    thread_ts=posted.ts,
                    reply_broadcast=True,
                    text="⏰ Still waiting for an answer to this question.",
                ),
            )
        except SlackRefused as exc:
            log.warning("could not remind about %s: %s", request_id, exc)
