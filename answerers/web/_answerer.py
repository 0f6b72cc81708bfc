"""The web channel: `askq worker web` runs one replica of a `web` group and serves its
pages (Starlette on uvicorn).

decide: an access route matches the request's scope, or decline.
present: record the question in the group's inbox (Redis) and announce it on the feed;
every replica's live pages show it within the feed's blocking read.
retract / remind: take it off with the reason / highlight it, the same way.
An answer lands at whichever replica serves the POST, through the group's handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.applications import Starlette

from askq import Answerer, AnswererOptions, AskError, GroupHandle, Offer, Retraction

from .._serving import AppServer, listening_socket
from ._app import build_app
from ._config import WebConfig, WebSettings
from ._inbox import Inbox, InboxEntry
from ._pages import InboxPages

log = logging.getLogger("askq.web")

# The replica writes what it shows again this often, so an inbox entry outlives the
# store's expiry while its question waits (and comes back if Redis lost it).
REFRESH_SECONDS = 600.0


class WebOptions(AnswererOptions):
    """The web answerer has no flags of its own: it reads the ASKQ_WEB_* settings
    (README, "Web inbox"), so every replica of a group is configured the same way."""


class WebAnswerer(Answerer[WebOptions]):
    kind = "web"
    Options = WebOptions

    config: WebConfig
    app: Starlette
    inbox: Inbox
    pages: InboxPages

    def __init__(
        self,
        options: WebOptions | None = None,
        *,
        settings: WebSettings | None = None,
        serve: bool = True,
    ) -> None:
        """`settings`: the ASKQ_WEB_* settings (default: read from the environment at
        start-up); `serve=False`: do not listen (the caller serves `self.app`)."""
        super().__init__(options)
        self._settings = settings
        self._serve = serve
        self._server: AppServer | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._showing: dict[str, Offer] = {}
        self.port: int | None = None  # the bound port (useful with port 0)

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        settings = self._settings or WebSettings.from_env()
        self.config = WebConfig.from_settings(settings)  # CONFIG_ERROR before going live
        self.inbox = Inbox(group.store, group.name)
        self.app, self.pages = build_app(group, self.config, self.inbox)
        try:
            await self.pages.hub.start()
            self._refresher = asyncio.create_task(self._refresh_loop())
            if not self._serve:
                return
            sock = listening_socket(
                self.config.host, self.config.port, "ASKQ_WEB_HOST/ASKQ_WEB_PORT"
            )
            self.port = int(sock.getsockname()[1])
            self._server = AppServer(self.app, sock, "the web server")
            await self._server.start()
            log.info("web inbox on http://%s:%d/", self.config.host, self.port)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresher
            self._refresher = None
        if hasattr(self, "pages"):
            await self.pages.hub.close()  # ends every live stream, so the server can stop
        if self._server is not None:
            await self._server.stop()
        self._server = None

    # --- the runtime's side ------------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        return self.config.access.match(offer.scope) is not None

    async def present(self, offer: Offer) -> None:
        self._showing[offer.request_id] = offer
        await self.inbox.add(InboxEntry.of(offer))

    async def retract(self, retraction: Retraction) -> None:
        self._showing.pop(retraction.request_id, None)
        await self.inbox.settle(
            retraction.request_id,
            retraction.state,
            by=retraction.by,
            code=retraction.code,
            overwrite=False,
            cause=retraction.cause,
        )

    async def remind(self, offer: Offer) -> None:
        await self.inbox.remind(offer.request_id)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            for request_id, offer in list(self._showing.items()):
                try:
                    if not await self.group.holds(request_id):
                        self._showing.pop(request_id, None)
                        continue
                    current = await self.inbox.entry(request_id)
                    await self.inbox.add(current or InboxEntry.of(offer), announce=current is None)
                except AskError as exc:
                    log.warning("refreshing the inbox entry of %s: %s", request_id, exc)
