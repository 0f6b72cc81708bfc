"""The email channel: `askq worker email`.

decide: a route for the request's scope, or decline (the waterfall moves on).
present: queue `send_question` once per recipient: a retried send that mails the
question once, with a Reply-To address bound to the request and that recipient. A
reply (at any replica's listener or HTTP endpoint) answers through the group and gets
feedback in the thread (`send_note`). A question refused for good (5xx) or bounced for
every recipient is released, so the waterfall falls through; so is one whose sends
ran out of tries.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from askq import (
    Answerer,
    AnswererOptions,
    Answers,
    AskError,
    GroupHandle,
    Offer,
    Retraction,
    SignedLinks,
    answered_by,
    visible,
)

from ._config import EmailConfig, EmailSettings
from ._http import HttpEndpoint
from ._inbox import (
    Inbox,
    Received,
    Verdict,
    answered_by_recipient,
    give_back_if_undeliverable,
    link_by,
)
from ._listener import DkimCheck, ReplyHandler, SmtpListener
from ._mime import parse
from ._outbox import Outbox
from ._smtp_out import Mailer
from ._state import FAILED, SENT, EmailStore

log = logging.getLogger("askq.email")


class EmailOptions(AnswererOptions):
    """The email answerer has no flags of its own: it reads the ASKQ_EMAIL_* settings
    (README, "Email"), so every replica of a group is configured the same way."""


class EmailAnswerer(Answerer[EmailOptions]):
    """People answer by email: a question mail per recipient, answered by a reply or a
    signed link (configured by the ASKQ_EMAIL_* settings; README, "Email").

    Replies arrive at the SMTP listener or the raw-MIME HTTP endpoint of any replica."""

    kind = "email"
    Options = EmailOptions
    uses_sends = True  # questions, reminders and feedback are retried sends

    config: EmailConfig
    store: EmailStore
    mailer: Mailer
    outbox: Outbox
    inbox: Inbox

    def __init__(
        self,
        options: EmailOptions | None = None,
        *,
        settings: EmailSettings | None = None,
        dkim: DkimCheck | None = None,
    ) -> None:
        """`settings`: the ASKQ_EMAIL_* settings (default: read from the environment at
        start-up). `dkim`: the DKIM check of inbound mail when ASKQ_EMAIL_REQUIRE_DKIM is
        on (default: dkimpy with the system's DNS)."""
        super().__init__(options)
        self._settings = settings
        self._dkim = dkim
        self.links: SignedLinks | None = None
        self.listener: SmtpListener | None = None
        self.http: HttpEndpoint | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        config = EmailConfig.from_settings(self._settings or EmailSettings.from_env())
        # Its reply addresses are this group's: another group's do not verify here.
        self.config = replace(config, addresses=config.addresses.for_group(group.name))
        self.store = EmailStore(group.store)
        self.mailer = Mailer(self.config)
        if self.config.link_base_url:
            self.links = SignedLinks(list(self.config.secrets))
        self.outbox = Outbox(self.config, group, self.store, self.mailer, self.links)
        self.inbox = Inbox(
            group, self.store, self.config.addresses, self.config.routes, self._queue_note
        )
        try:
            if self._dkim is None and self.config.require_dkim:
                from ._dkim import dkim_check

                self._dkim = dkim_check()
            if self.config.listen:
                handler = ReplyHandler(self.config.addresses, self.receive)
                self.listener = SmtpListener(
                    handler,
                    self.config.listen_host,
                    self.config.listen_port,
                    max_bytes=self.config.max_message_bytes,
                    tls_context=self.config.tls_context,
                )
                await self.listener.start()
            if self.config.wants_http:
                self.http = HttpEndpoint(
                    self.config.http_host,
                    self.config.http_port,
                    receive=self.receive,
                    secret=self.config.inbound_secret,
                    max_bytes=self.config.max_message_bytes,
                    routes=self._link_routes(),
                )
                await self.http.start()
        except BaseException:
            await self.stop()  # the runtime calls stop() only after a successful start
            raise

    async def stop(self) -> None:
        if self.listener is not None:
            await self.listener.stop()
            self.listener = None
        if self.http is not None:
            await self.http.stop()
            self.http = None

    def _link_routes(self) -> list[Any]:
        """The web channel's signed-link pages, for this group, when links are on."""
        if self.links is None:
            return []
        from askq.answerers.web import links_routes

        async def answered(request_id: str, answers: Answers, by: str) -> None:
            await self.store.record_outcome(request_id, "ANSWERED", by, overwrite=True)

        return links_routes(
            self.group,
            self.links,
            by=lambda claims: link_by(claims.recipient),
            on_answered=answered,
            secure_cookies=(self.config.link_base_url or "").startswith("https://"),
            static=True,
        )

    async def receive(
        self, raw: bytes, mail_from: str | None = None, rcpt_tos: tuple[str, ...] = ()
    ) -> Received:
        """Handle one inbound message (a reply, a bounce, an automatic reply), as the
        SMTP listener or the HTTP endpoint got it. With ASKQ_EMAIL_REQUIRE_DKIM, one
        without a valid DKIM signature of its From domain is refused first."""
        if self.config.require_dkim and self._dkim is not None:
            why = await self._dkim(raw)
            if why is not None:
                log.warning("inbound mail from %s refused: %s", visible(mail_from or "?"), why)
                return Received(Verdict.REFUSED, why)
        return await self.inbox.receive(parse(raw, mail_from=mail_from, rcpt_tos=rcpt_tos))

    # --- the runtime's side ------------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        return self.config.routes.match(offer.scope) is not None

    async def present(self, offer: Offer) -> None:
        route = self.config.routes.match(offer.scope)
        if route is None:  # a recovered claim whose route is gone
            await self._give_back(offer.request_id, "no route for its scope any more")
            return
        for recipient in route.to:
            await self.group.send("send_question", request_id=offer.request_id, recipient=recipient)

    async def retract(self, retraction: Retraction) -> None:
        state = retraction.state.value
        if state not in ("ANSWERED", "CANCELLED", "FAILED"):
            return  # escalated: the links show it; the person's late reply is told
        await self.store.record_outcome(
            retraction.request_id, state, retraction.by, overwrite=False
        )
        if not self.config.notify_elsewhere or state == "FAILED":
            return
        why = retraction.why_cancelled
        if state == "ANSWERED":
            line = f"This question was {visible(answered_by(retraction.by))}: no answer is needed."
        else:
            line = f"This question was withdrawn{f' ({why})' if why else ''}: no answer is needed."
        deliveries = await self.store.deliveries(retraction.request_id)
        answerer = answered_by_recipient(retraction.by)
        for recipient, status in deliveries.items():
            if status == SENT and recipient != answerer:
                await self._queue_note(
                    {"request_id": retraction.request_id, "to": recipient, "lines": [line]}
                )

    async def remind(self, offer: Offer) -> None:
        deliveries = await self.store.deliveries(offer.request_id)
        for recipient, status in deliveries.items():
            if status == SENT:
                await self.group.send(
                    "send_reminder", request_id=offer.request_id, recipient=recipient
                )

    async def send_failed(self, job: str, kwargs: dict[str, Any], error: BaseException) -> None:
        if job != "send_question":
            return
        request_id, recipient = kwargs["request_id"], kwargs["recipient"]
        await self.store.record_delivery(request_id, recipient, f"{FAILED}: {error}")
        try:
            request = await self.group.request(request_id)
        except AskError:
            return
        route = self.config.routes.match(request.scope)
        await give_back_if_undeliverable(
            self.group, self.store, request_id, route.to if route else (recipient,)
        )

    async def _give_back(self, request_id: str, why: str) -> None:
        log.warning("email gives request %s back: %s", request_id, why)
        try:
            await self.group.release(request_id)
        except AskError as exc:
            log.info("release of %s: %s", request_id, exc.message)

    async def _queue_note(self, note: dict[str, Any]) -> None:
        await self.group.send("send_note", **note)

    # --- sends (retried; each safe to run twice), run by `Outbox` ----------------------

    async def send_question(self, request_id: str, recipient: str) -> None:
        """Mail the question to one recipient once, however often this runs."""
        await self.outbox.question(request_id, recipient)

    async def send_reminder(self, request_id: str, recipient: str) -> None:
        """Remind one recipient, as a reply in the question's thread."""
        await self.outbox.reminder(request_id, recipient)

    async def send_note(
        self,
        request_id: str,
        to: str,
        lines: list[str],
        in_reply_to: str | None = None,
        references: list[str] | None = None,
        with_question: bool = False,
    ) -> None:
        """A reply in the thread (feedback on a reply, "answered elsewhere"), sent once."""
        await self.outbox.note(request_id, to, lines, in_reply_to, references, with_question)
