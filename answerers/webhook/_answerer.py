"""The webhook channel: `askq worker webhook`.

decide: a route (receiver URL) for the request's scope, or decline.
present: queue `post_question`, a retried send that POSTs the `question.asked` event,
signed, with the callback URL and the request's answer token. A 5xx, a timeout or a
lost connection is tried again with the send queue's backoff, up to
`ASKQ_WEBHOOK_TRIES` POSTs; then, or at once on a 4xx, the group gives the question back
(released), so the waterfall moves on. An answer POSTed to the callback (at any
replica) answers through the group; `retract` (answered elsewhere, withdrawn,
escalated, timed out) and an answer taken here POST `question.settled` or
`question.escalated`, so the receiver can close its ticket.

Every event of a request keeps one `webhook-id` through its retries: a receiver that
got a POST whose response was lost sees the same id again, and drops it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from askq import (
    AnswererOptions,
    AskError,
    ErrorCode,
    GroupHandle,
    Offer,
    Retraction,
    RetryLater,
)

from .._chat import ChatAnswerer
from . import _events as events
from ._answers import AnswerHandler
from ._config import WebhookConfig, WebhookSettings
from ._delivery import Delivery, WebhookRefused
from ._endpoint import ANSWER_PATH, Endpoint
from ._events import Outcome
from ._signing import Signer
from ._state import WebhookStore

log = logging.getLogger("askq.webhook")

REMINDER_GAP_SECONDS = 60


class WebhookOptions(AnswererOptions):
    """The webhook answerer has no flags of its own: it reads the ASKQ_WEBHOOK_*
    settings (README, "Signed webhooks"), so every replica of a group is configured
    the same way."""


class WebhookAnswerer(ChatAnswerer[WebhookOptions]):
    kind = "webhook"
    log = log
    post_failed = "could not deliver it"
    Options = WebhookOptions
    uses_sends = True  # every POST is a retried send, run by any replica

    config: WebhookConfig
    store: WebhookStore
    signer: Signer

    def __init__(
        self, options: WebhookOptions | None = None, *, settings: WebhookSettings | None = None
    ) -> None:
        """`settings`: the ASKQ_WEBHOOK_* settings (default: read from the environment at
        start-up)."""
        super().__init__(options)
        self._settings = settings
        self._delivery: Delivery | None = None
        self._endpoint: Endpoint | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        settings = self._settings or WebhookSettings.from_env()
        self.config = config = WebhookConfig.from_settings(settings)  # CONFIG_ERROR first
        # The send queue reads its tries from the answerer once started (the core's
        # `send_tries` is a class default; this group's come from its settings).
        setattr(self, "send_tries", config.tries)  # noqa: B010 - shadows the ClassVar
        self.store = WebhookStore(group.store)
        self.signer = Signer(config.secret, config.key)
        try:
            self._delivery = Delivery(config.timeout)
            answers = AnswerHandler(group, self.store)
            self._endpoint = Endpoint(answers.handle, config.http_host, config.http_port)
            await self._endpoint.start()
        except BaseException:
            await self.stop()  # the runtime calls stop() only after a successful start
            raise

    async def stop(self) -> None:
        if self._endpoint is not None:
            await self._endpoint.stop()
            self._endpoint = None
        if self._delivery is not None:
            await self._delivery.close()
            self._delivery = None

    @property
    def http_port(self) -> int | None:
        """The port the callback listens on."""
        return self._endpoint.port if self._endpoint is not None else None

    def answer_url(self, request_id: str) -> str:
        path = ANSWER_PATH.format(group=self.group.name, request_id=request_id)
        base = self.config.public_url
        if not base:
            host = self.config.http_host
            base = f"http://{f'[{host}]' if ':' in host else host}:{self.http_port}"
        return base + path

    # --- the runtime's side ------------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        return self.config.routes.match(offer.scope) is not None

    async def retract(self, retraction: Retraction) -> None:
        outcome = Outcome(
            str(retraction.state),
            code=retraction.code,
            by=retraction.by,
            why=retraction.why_cancelled,
            cause=retraction.cause,
        )
        await self.store.set_outcome(retraction.request_id, outcome, overwrite=False)
        await self.group.send("post_closed", request_id=retraction.request_id)

    def _giver(self) -> str:
        return f"webhook group {self.group.name}"

    async def _post(
        self, request_id: str, event: str, url: str, body_of: Callable[[float], str]
    ) -> None:
        """POST one event, signed; its message id and time the same in every retry."""
        assert self._delivery is not None, "the webhook answerer is not started"
        message_id, at = await self.store.message(request_id, event, time.time())
        body = body_of(at)
        headers = self.signer.headers(message_id, time.time(), body)
        await self._delivery.post(url, body, headers)

    # --- sends (retried; each safe to run twice) ---------------------------------------

    async def post_question(self, request_id: str) -> None:
        """Deliver the question once, however often this runs and at whichever replica."""
        record = await self.store.record(request_id)
        if record.delivered or record.outcome is not None:
            return  # delivered already, or over before it was
        if not await self.group.holds(request_id):
            log.info("request %s is no longer this group's; not sending it", request_id)
            return
        request = await self.group.request(request_id)
        url = self.config.routes.match(request.scope)
        if url is None:  # the routes changed under a recovered claim
            await self._give_back(request_id, "no route for its scope any more")
            return
        if not await self.store.lease_post(request_id):
            # Another run is POSTing it; look again once its lease is over.
            raise RetryLater(await self.group.store.lease_left(request_id), "being sent elsewhere")
        if (await self.store.record(request_id)).delivered:
            # Delivered by the run that held the lease between our look and our lease
            # (it drops the lease as it records the delivery): nothing more to send.
            await self.group.store.drop_lease(request_id)
            return
        try:
            group = self.group.name
            nonce = await self.store.nonce(
                request_id, lambda n: self.signer.token(group, request_id, n)
            )
            token = self.signer.token(group, request_id, nonce)
            answer_url = self.answer_url(request_id)
            await self._post(
                request_id,
                "asked",
                url,
                lambda at: events.asked(request, group, at, answer_url, token),
            )
        except WebhookRefused as exc:
            await self.group.store.drop_lease(request_id)
            await self._give_back(request_id, f"the receiver refused it: {exc}")
            return
        except BaseException:
            await self.group.store.drop_lease(request_id)
            raise
        await self.store.record_delivery(request_id, url)
        await self.post_closed(request_id)  # a no-op unless it was settled meanwhile

    async def post_closed(self, request_id: str) -> None:
        """Tell the receiver what became of a question it was sent; a no-op until it
        was delivered and is over. Delivered at least once (the same webhook-id)."""
        record = await self.store.record(request_id)
        if not record.delivered or record.outcome is None or record.closed:
            return
        assert record.url is not None
        outcome = record.outcome
        if outcome.state == "ANSWERED" and not outcome.answers:
            settlement = await self.group.settlement(request_id)
            if settlement is not None and settlement.answers:
                outcome = Outcome(
                    outcome.state,
                    code=outcome.code,
                    by=outcome.by,
                    here=outcome.here,
                    answers=tuple(settlement.answers),
                )
        group = self.group.name
        try:
            await self._post(
                request_id,
                "closed",
                record.url,
                lambda at: events.closed(request_id, group, at, outcome),
            )
        except WebhookRefused as exc:  # the receiver does not want it: nothing to retry
            log.warning("the receiver refused the close of %s: %s", request_id, exc)
        await self.store.record_closed(request_id)

    async def post_reminder(self, request_id: str) -> None:
        """Remind the receiver (at most once a minute per request, so a retried or
        doubled job does not remind twice)."""
        record = await self.store.record(request_id)
        if not record.delivered or record.outcome is not None or record.url is None:
            return
        if not await self.group.store.once(f"remind:{request_id}", REMINDER_GAP_SECONDS):
            return
        try:
            request = await self.group.request(request_id)
        except AskError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return
            raise
        group = self.group.name
        event = f"reminder:{int(time.time()) // REMINDER_GAP_SECONDS}"
        try:
            await self._post(
                request_id, event, record.url, lambda at: events.reminder(request, group, at)
            )
        except WebhookRefused as exc:
            log.warning("the receiver refused a reminder of %s: %s", request_id, exc)
        except BaseException:
            await self.group.store.forget_once(f"remind:{request_id}")
            raise
