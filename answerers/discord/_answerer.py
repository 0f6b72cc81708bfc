"""The Discord channel: `askq worker discord`.

decide: a route for the request's scope and a request Discord's components can carry
(`_messages.fits`), or decline (the waterfall moves on).
present: queue `post_question`, a retried send that posts the message once, through
Discord's REST API, to the route's channel or DM. An interaction (at any replica,
verified) answers through the group and `update_message` edits the message in place
for everyone; `retract` (answered elsewhere, withdrawn, escalated, timed out) does the
same and notes it in a reply. A question that cannot be posted is released, so the
waterfall falls through.
"""

from __future__ import annotations

import logging

from askq import (
    AnswererOptions,
    GroupHandle,
    Offer,
    Retraction,
    RetryLater,
)

from .._chat import ChatAnswerer, shown
from . import _messages as messages
from ._config import DiscordConfig, DiscordSettings
from ._endpoint import Endpoint
from ._interactions import InteractionHandler
from ._messages import Outcome
from ._rest import DiscordRefused, DiscordRest
from ._routes import Route
from ._state import DiscordStore
from ._verify import Verifier

log = logging.getLogger("askq.discord")

REMINDER_GAP_SECONDS = 60


class DiscordOptions(AnswererOptions):
    """The Discord answerer has no flags of its own: it reads the ASKQ_DISCORD_* settings
    (README, "Discord"), so every replica of a group is configured the same way."""


class DiscordAnswerer(ChatAnswerer[DiscordOptions]):
    kind = "discord"
    log = log
    who = "Discord"
    Options = DiscordOptions
    uses_sends = True  # posts and edits are retried sends, run by any replica

    config: DiscordConfig
    store: DiscordStore
    rest: DiscordRest
    interactions: InteractionHandler

    def __init__(
        self, options: DiscordOptions | None = None, *, settings: DiscordSettings | None = None
    ) -> None:
        """`settings`: the ASKQ_DISCORD_* settings (default: read from the environment at
        start-up)."""
        super().__init__(options)
        self._settings = settings
        self._rest: DiscordRest | None = None
        self._endpoint: Endpoint | None = None
        self._handler: InteractionHandler | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        settings = self._settings or DiscordSettings.from_env()
        self.config = config = DiscordConfig.from_settings(settings)  # CONFIG_ERROR first
        self.store = DiscordStore(group.store)
        try:
            self._rest = self.rest = DiscordRest(
                config.api_url, config.bot_token, config.application_id
            )
            self._handler = self.interactions = InteractionHandler(
                group, self.store, self.rest, config.routes
            )
            self._endpoint = Endpoint(
                Verifier(config.public_key, config.max_skew),
                config.application_id,
                self.interactions.handle,
                config.http_host,
                config.http_port,
            )
            await self._endpoint.start()
        except BaseException:
            await self.stop()  # the runtime calls stop() only after a successful start
            raise

    async def stop(self) -> None:
        if self._endpoint is not None:
            await self._endpoint.stop()
            self._endpoint = None
        if self._handler is not None:
            await self._handler.close()
            self._handler = None
        if self._rest is not None:
            await self._rest.close()
            self._rest = None

    @property
    def http_port(self) -> int | None:
        """The port the interactions endpoint listens on."""
        return self._endpoint.port if self._endpoint is not None else None

    # --- the runtime's side ------------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        if self.config.routes.match(offer.scope) is None:
            return False
        if not messages.fits(offer.questions):
            log.info("Discord declines %s: %s", offer.request_id, messages.why_not(offer.questions))
            return False
        return True

    async def retract(self, retraction: Retraction) -> None:
        outcome = Outcome.retracted(retraction)
        await self.store.set_outcome(retraction.request_id, outcome, overwrite=False)
        await self.group.send("update_message", request_id=retraction.request_id, note=True)

    async def _channel(self, route: Route) -> str:
        """The channel of the route: its own, or the bot's DM with its user."""
        if route.kind == "channel":
            return route.target
        channel = await self.store.dm_channel(route.target)
        if channel is None:
            channel = await self.rest.open_dm(route.target)
            await self.store.remember_dm(route.target, channel)
        return channel

    # --- sends (retried; each safe to run twice) ---------------------------------------

    async def post_question(self, request_id: str) -> None:
        """Post the message once, however often this runs and at whichever replica."""
        posted = await self.store.message(request_id)
        if posted.posted or posted.outcome is not None:
            return  # posted already, or settled before it was shown
        if not await self.group.holds(request_id):
            log.info("request %s is no longer this group's; not posting it", request_id)
            return
        request = await self.group.request(request_id)
        route = self.config.routes.match(request.scope)
        if route is None or not messages.fits(request.questions):  # changed under a recovered claim
            await self._give_back(request_id, "no route for it any more")
            return
        if not await self.store.lease_post(request_id):
            # Another run is posting it; look again once its lease is over.
            raise RetryLater(
                await self.group.store.lease_left(request_id), "being posted elsewhere"
            )
        if (await self.store.message(request_id)).posted:
            # Posted by the run that held the lease between our look and our lease
            # (it drops the lease as it records the post): nothing more to post.
            await self.group.store.drop_lease(request_id)
            return
        try:
            channel = await self._channel(route)
            message_id = await self.rest.post(
                channel, messages.question_message(request, self.group.name)
            )
        except DiscordRefused as exc:
            await self.group.store.drop_lease(request_id)
            await self._give_back(
                request_id, f"Discord refused to post to {route.describe()}: {exc}"
            )
            return
        except BaseException:
            await self.group.store.drop_lease(request_id)
            raise
        await self.store.record_post(request_id, channel, message_id)
        await self.update_message(request_id)  # a no-op unless it settled while we posted

    async def update_message(self, request_id: str, note: bool = False) -> None:
        """Show what became of the request on its message (and, `note`: say so in a
        reply); a no-op until it is posted and settled."""
        posted = await self.store.message(request_id)
        if not posted.posted or posted.outcome is None:
            return
        assert posted.channel and posted.message
        final = await self._final(request_id, posted.outcome)
        if final is None:
            return  # expired: nothing left to show
        outcome, request = final
        # The click's update and the post's own (when the click beat the post's
        # bookkeeping) may both run; each edit counts against the channel's rate limit.
        marker = shown(request_id, outcome)
        if await self.group.store.once(marker, self.store.ttl):
            try:
                await self.rest.edit(
                    posted.channel, posted.message, messages.final_message(request, outcome)
                )
            except DiscordRefused as exc:  # a deleted message, a removed bot: moot
                log.warning("could not edit the message of %s: %s", request_id, exc)
            except BaseException:
                await self.group.store.forget_once(marker)  # to be retried
                raise
        if note and posted.outcome.name is None:
            await self._note(request_id, posted.channel, posted.message, outcome)

    async def _note(self, request_id: str, channel: str, message_id: str, outcome: Outcome) -> None:
        """A reply saying what became of it (an edited message notifies nobody; a reply
        shows in the channel)."""
        if not await self.group.store.once(f"note:{request_id}", self.store.ttl):
            return
        try:
            await self.rest.post(channel, messages.note_message(outcome, message_id))
        except DiscordRefused as exc:
            log.warning("could not note what became of %s: %s", request_id, exc)
        except BaseException:
            await self.group.store.forget_once(f"note:{request_id}")
            raise

    async def post_reminder(self, request_id: str) -> None:
        """Nudge the humans with a reply to the message (at most one a minute per
        request, so a retried or doubled job does not nudge twice)."""
        posted = await self.store.message(request_id)
        if not posted.posted or posted.outcome is not None:
            return
        assert posted.channel and posted.message
        if not await self.group.store.once(f"remind:{request_id}", REMINDER_GAP_SECONDS):
            return
        try:
            await self.rest.post(posted.channel, messages.reminder_message(posted.message))
        except DiscordRefused as exc:
            log.warning("could not remind about %s: %s", request_id, exc)
