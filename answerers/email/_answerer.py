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

import hashlib
import json
import logging
from email.utils import make_msgid
from typing import Any

from askq import (
    Answerer,
    AnswererOptions,
    Answers,
    AskError,
    AskRequest,
    ErrorCode,
    GroupHandle,
    Offer,
    Retraction,
    RetryLater,
    SignedLinks,
    visible,
)

from . import _compose as compose
from ._config import EmailConfig, EmailSettings
from ._http import HttpEndpoint
from ._inbox import Inbox, Received, give_back_if_undeliverable
from ._listener import DkimCheck, ReplyHandler, SmtpListener
from ._mime import Inbound
from ._smtp_out import Mailer, MailRefused
from ._state import FAILED, SENT, EmailStore, tag

log = logging.getLogger("askq.email")

REMINDER_GAP_SECONDS = 60


class EmailOptions(AnswererOptions):
    """The email answerer has no flags of its own: it reads the ASKQ_EMAIL_* settings
    (README, "Email"), so every replica of a group is configured the same way."""


class EmailAnswerer(Answerer[EmailOptions]):
    kind = "email"
    Options = EmailOptions
    uses_sends = True  # questions, reminders and feedback are retried sends

    config: EmailConfig
    store: EmailStore
    mailer: Mailer
    inbox: Inbox

    def __init__(
        self,
        options: EmailOptions | None = None,
        *,
        settings: EmailSettings | None = None,
        dkim: DkimCheck | None = None,
    ) -> None:
        """`settings`: the ASKQ_EMAIL_* settings (default: read from the environment at
        start-up). `dkim`: the listener's DKIM check (default: dkimpy with the system's
        DNS, when ASKQ_EMAIL_REQUIRE_DKIM is on)."""
        super().__init__(options)
        self._settings = settings
        self._dkim = dkim
        self.links: SignedLinks | None = None
        self.listener: SmtpListener | None = None
        self.http: HttpEndpoint | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        self.config = EmailConfig.from_settings(self._settings or EmailSettings.from_env())
        self.store = EmailStore(group.store)
        self.mailer = Mailer(self.config)
        if self.config.link_base_url:
            self.links = SignedLinks(list(self.config.secrets))
        self.inbox = Inbox(
            group, self.store, self.config.addresses, self.config.routes, self._queue_note
        )
        try:
            if self.config.listen:
                dkim = self._dkim
                if dkim is None and self.config.require_dkim:
                    from ._dkim import dkim_check

                    dkim = dkim_check()
                handler = ReplyHandler(self.config.addresses, self.receive, dkim)
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
            by=lambda claims: f"email:{claims.recipient}",  # as a reply's answer is
            on_answered=answered,
            secure_cookies=(self.config.link_base_url or "").startswith("https://"),
            static=True,
        )

    async def receive(self, inbound: Inbound) -> Received:
        """Handle one inbound message (a reply, a bounce, an automatic reply)."""
        return await self.inbox.receive(inbound)

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
        line = (
            f"This question was answered elsewhere by {visible(retraction.by or 'someone')}."
            if state == "ANSWERED"
            else "This question was withdrawn: no answer is needed any more."
        )
        deliveries = await self.store.deliveries(retraction.request_id)
        answerer = (retraction.by or "").removeprefix("email:")
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

    # --- composing ---------------------------------------------------------------------

    def _links(self, request_id: str, recipient: str) -> compose.LinkMaker | None:
        links, base = self.links, self.config.link_base_url
        if links is None or base is None:
            return None
        group, ttl = self.group.name, self.config.link_ttl
        minted: dict[tuple[str, str | None], str] = {}  # one link per choice per email

        def make(question_id: str, option: str | None) -> str:
            key = (question_id, option)
            if key not in minted:
                token = links.mint(
                    request_id,
                    group,
                    recipient,
                    ttl=ttl,
                    question_id=question_id if option is not None else None,
                    option=option,
                )
                minted[key] = f"{base}/a/{token}"
            return minted[key]

        return make

    def _question_id(self, request_id: str, recipient: str) -> str:
        return compose.message_id(request_id, recipient, self.config.domain)

    def _envelope(
        self,
        request_id: str,
        recipient: str,
        *,
        in_reply_to: str | None = None,
        references: tuple[str, ...] = (),
    ) -> compose.Envelope:
        first = in_reply_to is None and not references
        return compose.Envelope(
            from_address=self.config.from_address,
            from_name=self.config.from_name,
            to=recipient,
            reply_to=self.config.addresses.address("answer", request_id, recipient),
            message_id=self._question_id(request_id, recipient)
            if first
            else make_msgid(domain=self.config.domain),
            in_reply_to=in_reply_to,
            references=references,
        )

    async def _pending_request(self, request_id: str) -> AskRequest | None:
        """The request while it is still this group's to ask about; else None."""
        if await self.store.outcome(request_id) is not None:
            return None  # settled (or withdrawn) before this ran
        if not await self.group.holds(request_id):
            log.info("request %s is no longer this group's; not mailing it", request_id)
            return None
        return await self.group.request(request_id)

    # --- sends (retried; each safe to run twice) ---------------------------------------

    async def send_question(self, request_id: str, recipient: str) -> None:
        """Mail the question to one recipient once, however often this runs."""
        if recipient in await self.store.deliveries(request_id):
            return
        request = await self._pending_request(request_id)
        if request is None:
            return
        route = self.config.routes.match(request.scope)
        if route is None or recipient not in route.to:  # the routes changed under a claim
            await self.store.record_delivery(request_id, recipient, f"{FAILED}: not routed")
            await give_back_if_undeliverable(
                self.group, self.store, request_id, route.to if route else (recipient,)
            )
            return
        if not await self.store.lease_send(request_id, recipient):
            left = await self.store.lease_left(request_id, recipient)
            raise RetryLater(left, "being sent elsewhere")
        # A recipient the route does not allow to answer (copied for information) gets
        # no links: a link would let them answer all the same.
        links = self._links(request_id, recipient) if route.allows(recipient) else None
        message = compose.question_message(request, self._envelope(request_id, recipient), links)
        bounce_to = self.config.addresses.address("bounce", request_id, recipient)
        try:
            await self.mailer.send(message, sender=bounce_to, recipient=recipient)
        except MailRefused as exc:
            log.warning("email of %s to %s refused: %s", request_id, recipient, exc)
            await self.store.record_delivery(request_id, recipient, f"{FAILED}: {exc}")
            await give_back_if_undeliverable(self.group, self.store, request_id, route.to)
            return
        except BaseException:
            await self.store.drop_lease(request_id, recipient)
            raise
        await self.store.record_delivery(request_id, recipient, SENT)

    async def send_reminder(self, request_id: str, recipient: str) -> None:
        """Remind one recipient, as a reply in the question's thread (at most once a
        minute, so a repeated job does not remind twice)."""
        if not await self.group.store.once(
            f"remind:{request_id}:{tag(recipient)}", REMINDER_GAP_SECONDS
        ):
            return
        request = await self._pending_request(request_id)
        if request is None:
            return
        first = self._question_id(request_id, recipient)
        message = compose.question_message(
            request,
            self._envelope(request_id, recipient, in_reply_to=first),
            self._links(request_id, recipient),
            preface=["Reminder: this question is still waiting for your answer.", ""],
            in_thread=True,
        )
        bounce_to = self.config.addresses.address("bounce", request_id, recipient)
        try:
            await self.mailer.send(message, sender=bounce_to, recipient=recipient)
        except MailRefused as exc:
            log.warning("reminder of %s to %s refused: %s", request_id, recipient, exc)

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
        digest = hashlib.sha256(
            json.dumps([request_id, to, lines, in_reply_to]).encode()
        ).hexdigest()[:24]
        marker = f"note:{digest}"
        if not await self.group.store.once(marker, self.store.ttl):
            return
        try:
            await self._send_note(
                request_id, to, lines, in_reply_to, references or [], with_question
            )
        except BaseException:
            await self.group.store.forget_once(marker)  # to be retried
            raise

    async def _send_note(
        self,
        request_id: str,
        to: str,
        lines: list[str],
        in_reply_to: str | None,
        references: list[str],
        with_question: bool,
    ) -> None:
        first = self._question_id(request_id, to)
        envelope = self._envelope(
            request_id,
            to,
            in_reply_to=in_reply_to or first,
            references=tuple(references) if in_reply_to else (),
        )
        try:
            request: AskRequest | None = await self.group.request(request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            request = None
        if request is not None and with_question:
            message = compose.question_message(
                request, envelope, self._links(request_id, to), preface=lines, in_thread=True
            )
        else:
            title = compose.subject(request.questions) if request else "[askq] your reply"
            message = compose.note_message(envelope, f"Re: {title}", lines)
        try:
            await self.mailer.send(message, sender=self.config.from_address, recipient=to)
        except MailRefused as exc:  # will not change by retrying; nothing else to do
            log.warning("note about %s to %s refused: %s", request_id, to, exc)
