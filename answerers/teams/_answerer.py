"""The Microsoft Teams channel: `askq worker teams`.

decide: a route for the request's scope, or decline (the waterfall moves on).
present: queue `post_question`, a retried send that posts the card once, proactively,
to the route's channel or personal chat. A click (at any replica) answers through the
group, gets the final card back at once, and `update_message` edits the card in place
for everyone; `retract` (answered elsewhere, withdrawn, escalated, timed out) does the
same and notes it in the card's thread. A question that cannot be posted is released,
so the waterfall falls through.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from askq import (
    AnswererOptions,
    GroupHandle,
    Offer,
    Retraction,
    RetryLater,
)

from .._chat import ChatAnswerer, shown
from . import _cards as cards
from . import _installs as installs
from ._actions import ActionHandler
from ._auth import BotTokens, OpenIdKeys
from ._cards import Outcome
from ._config import TeamsConfig, TeamsSettings
from ._connector import Connector, TeamsRefused, message
from ._endpoint import Endpoint
from ._routes import Route
from ._state import Reference, TeamsStore
from ._token import BotToken

log = logging.getLogger("askq.teams")

REMINDER_GAP_SECONDS = 60
CHANNEL_SUFFIXES = ("@thread.tacv2", "@thread.skype")  # a team's channels (threads)


class TeamsOptions(AnswererOptions):
    """The Teams answerer has no flags of its own: it reads the ASKQ_TEAMS_* settings
    (README, "Microsoft Teams"), so every replica of a group is configured the same way."""


class TeamsAnswerer(ChatAnswerer[TeamsOptions]):
    kind = "teams"
    log = log
    who = "Teams"
    Options = TeamsOptions
    uses_sends = True  # posts and updates are retried sends, run by any replica

    config: TeamsConfig
    store: TeamsStore
    connector: Connector
    actions: ActionHandler

    def __init__(
        self, options: TeamsOptions | None = None, *, settings: TeamsSettings | None = None
    ) -> None:
        """`settings`: the ASKQ_TEAMS_* settings (default: read from the environment at
        start-up)."""
        super().__init__(options)
        self._settings = settings
        self._token: BotToken | None = None
        self._http: httpx.AsyncClient | None = None
        self._endpoint: Endpoint | None = None
        self._connector: Connector | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        settings = self._settings or TeamsSettings.from_env()
        self.config = config = TeamsConfig.from_settings(settings)  # CONFIG_ERROR first
        self.store = TeamsStore(group.store)
        try:
            self._token = BotToken(
                config.app_id,
                config.app_password,
                f"{config.login_url}/{config.token_tenant}",
                config.bot_scope,
            )
            await self._token.check()
            self._connector = self.connector = Connector(
                self._token, config.app_id, config.service_url
            )
            self.actions = ActionHandler(group, self.store, self.connector, config.routes)
            self._http = httpx.AsyncClient(timeout=15.0)
            tokens = BotTokens(
                OpenIdKeys(config.openid_url, self._http),
                app_id=config.app_id,
                issuer=config.issuer,
            )
            self._endpoint = Endpoint(
                tokens,
                config.tenant_allowed,
                self.actions.handle,
                self._on_activity,
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
        if self._connector is not None:
            await self._connector.close()
            self._connector = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._token is not None:
            self._token.close()
            self._token = None

    @property
    def http_port(self) -> int | None:
        """The port the messaging endpoint listens on."""
        return self._endpoint.port if self._endpoint is not None else None

    async def _on_activity(self, activity: Any) -> None:
        await installs.record(self.store, activity)

    # --- the runtime's side ------------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        return self.config.routes.match(offer.scope) is not None

    async def retract(self, retraction: Retraction) -> None:
        outcome = Outcome.retracted(retraction)
        await self.store.set_outcome(retraction.request_id, outcome, overwrite=False)
        await self.group.send("update_message", request_id=retraction.request_id, note=True)

    # --- where a route's card goes -----------------------------------------------------

    async def _target(self, route: Route) -> tuple[str, str, bool]:
        """(service URL, conversation id, threaded) of the route's conversation."""
        if route.kind == "conversation":
            reference = await self.store.reference(route.target)
            if reference is not None:
                return reference.service_url, reference.conversation, reference.kind == "channel"
            service_url = self.config.service_url
            tenants = self.config.tenants - {"*"}
            if len(tenants) == 1:  # the tenant's service URL, once known
                service_url = (
                    await self.store.tenant_service_url(next(iter(tenants))) or service_url
                )
            return service_url, route.target, route.target.endswith(CHANNEL_SUFFIXES)
        reference = await self.store.personal(route.target)
        if reference is not None:
            return reference.service_url, reference.conversation, False
        # No reference: ask Teams for the personal chat (the app must be installed for
        # the user; Teams answers 403 or 404 otherwise, which gives the question back).
        tenants = self.config.tenants - {"*"}
        tenant = next(iter(tenants)) if len(tenants) == 1 else None
        service_url = await self.store.tenant_service_url(tenant) or self.config.service_url
        conversation = await self.connector.open_personal(service_url, tenant, route.target)
        await self.store.remember(
            Reference(conversation, service_url, tenant, "personal"), route.target
        )
        return service_url, conversation, False

    # --- sends (retried; each safe to run twice) ---------------------------------------

    async def post_question(self, request_id: str) -> None:
        """Post the card once, however often this runs and at whichever replica."""
        posted = await self.store.card(request_id)
        if posted.posted or posted.outcome is not None:
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
        if (await self.store.card(request_id)).posted:
            # Posted by the run that held the lease between our look and our lease
            # (it drops the lease as it records the post): nothing more to post.
            await self.group.store.drop_lease(request_id)
            return
        try:
            service_url, conversation, threaded = await self._target(route)
            card = cards.question_card(request, self.group.name)
            activity_id = await self.connector.post(
                service_url, conversation, message(card, cards.summary(request))
            )
        except TeamsRefused as exc:
            await self.group.store.drop_lease(request_id)
            await self._give_back(request_id, f"Teams refused to post to {route.describe()}: {exc}")
            return
        except BaseException:
            await self.group.store.drop_lease(request_id)
            raise
        await self.store.record_post(request_id, conversation, activity_id, service_url, threaded)
        await self.update_message(request_id)  # a no-op unless it settled while we posted

    async def update_message(self, request_id: str, note: bool = False) -> None:
        """Show what became of the request on its card (and, `note`: say so in the
        card's thread); a no-op until it is posted and settled."""
        posted = await self.store.card(request_id)
        if not posted.posted or posted.outcome is None:
            return
        assert posted.conversation and posted.activity and posted.service_url
        final = await self._final(request_id, posted.outcome)
        if final is None:
            return  # expired: nothing left to show
        outcome, request = final
        # The click's update and the post's own (when the click beat the post's
        # bookkeeping) may both run; each edit counts against Teams' rate limit.
        marker = shown(request_id, outcome)
        if await self.group.store.once(marker, self.store.ttl):
            try:
                await self.connector.update(
                    posted.service_url,
                    posted.conversation,
                    posted.activity,
                    message(cards.final_card(request, outcome), cards.summary(request, outcome)),
                )
            except TeamsRefused as exc:  # a deleted card, a removed app: moot
                log.warning("could not update the card of %s: %s", request_id, exc)
            except BaseException:
                await self.group.store.forget_once(marker)  # to be retried
                raise
        if note and posted.outcome.name is None:
            await self._note(
                request_id,
                posted.service_url,
                posted.conversation,
                posted.activity,
                posted.threaded,
                outcome,
            )

    async def _note(
        self,
        request_id: str,
        service_url: str,
        conversation: str,
        activity_id: str,
        threaded: bool,
        outcome: Outcome,
    ) -> None:
        """A reply in the card's thread saying what became of it (an edited card
        notifies nobody; the people following the thread hear of it)."""
        if not await self.group.store.once(f"note:{request_id}", self.store.ttl):
            return
        try:
            await self.connector.reply(
                service_url,
                conversation,
                activity_id,
                message(cards.note_card(outcome), outcome.headline_text()),
                threaded=threaded,
            )
        except TeamsRefused as exc:
            log.warning("could not note what became of %s: %s", request_id, exc)
        except BaseException:
            await self.group.store.forget_once(f"note:{request_id}")
            raise

    async def post_reminder(self, request_id: str) -> None:
        """Nudge the humans in the card's thread (at most one a minute per request, so
        a retried or doubled job does not nudge twice)."""
        posted = await self.store.card(request_id)
        if not posted.posted or posted.outcome is not None:
            return
        assert posted.conversation and posted.activity and posted.service_url
        if not await self.group.store.once(f"remind:{request_id}", REMINDER_GAP_SECONDS):
            return
        try:
            await self.connector.reply(
                posted.service_url,
                posted.conversation,
                posted.activity,
                message(cards.reminder_card(), "Still waiting for an answer"),
                threaded=posted.threaded,
            )
        except TeamsRefused as exc:
            log.warning("could not remind about %s: %s", request_id, exc)
