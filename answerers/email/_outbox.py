"""What the email channel mails, composed and sent: the question to one recipient, a
reminder in its thread, a note in the thread (feedback on a reply, "answered
elsewhere"). Each is the body of a retried send (`EmailAnswerer.send_*`), safe to run
twice: a question is recorded once sent (with a lease against two replicas sending it
at once), a reminder goes at most once a minute, a note once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from email.utils import make_msgid

from askq import AskError, AskRequest, ErrorCode, GroupHandle, RetryLater, SignedLinks

from . import _compose as compose
from ._config import EmailConfig
from ._inbox import give_back_if_undeliverable
from ._smtp_out import Mailer, MailRefused
from ._state import FAILED, SENT, EmailStore, tag

log = logging.getLogger("askq.email")

REMINDER_GAP_SECONDS = 60


class Outbox:
    def __init__(
        self,
        config: EmailConfig,
        group: GroupHandle,
        store: EmailStore,
        mailer: Mailer,
        links: SignedLinks | None,
    ) -> None:
        self.config = config
        self.group = group
        self.store = store
        self.mailer = mailer
        self.links = links

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
        return compose.message_id(request_id, recipient, self.config.domain, self.group.name)

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

    async def question(self, request_id: str, recipient: str) -> None:
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

    async def reminder(self, request_id: str, recipient: str) -> None:
        """Remind one recipient, as a reply in the question's thread (at most once a
        minute, so a repeated job does not remind twice)."""
        marker = f"remind:{request_id}:{tag(recipient)}"
        if not await self.group.store.once(marker, REMINDER_GAP_SECONDS):
            return
        try:
            await self._reminder(request_id, recipient)
        except BaseException:
            await self.group.store.forget_once(marker)  # to be retried
            raise

    async def _reminder(self, request_id: str, recipient: str) -> None:
        request = await self._pending_request(request_id)
        if request is None:
            return
        route = self.config.routes.match(request.scope)
        allowed = route is not None and route.allows(recipient)
        first = self._question_id(request_id, recipient)
        message = compose.question_message(
            request,
            self._envelope(request_id, recipient, in_reply_to=first),
            self._links(request_id, recipient) if allowed else None,
            preface=["Reminder: this question is still waiting for your answer.", ""],
            in_thread=True,
        )
        bounce_to = self.config.addresses.address("bounce", request_id, recipient)
        try:
            await self.mailer.send(message, sender=bounce_to, recipient=recipient)
        except MailRefused as exc:
            log.warning("reminder of %s to %s refused: %s", request_id, recipient, exc)

    async def note(
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
            await self._note(request_id, to, lines, in_reply_to, references or [], with_question)
        except BaseException:
            await self.group.store.forget_once(marker)  # to be retried
            raise

    async def _note(
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
