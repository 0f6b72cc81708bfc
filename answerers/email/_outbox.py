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

    async def _links(self, request: AskRequest, recipient: str) -> compose.LinkMaker | None:
        """The answer links of one email to `recipient`: short stored links (their
        claims in the group's store, which the group's own link pages read)."""
        links, base = self.links, self.config.link_base_url
        if links is None or base is None:
            return None
        minted: dict[tuple[str, str | None], str] = {}
        for question_id, option in compose.link_choices(request.questions):
            token = await links.issue(
                self.group.store,
                request.id,
                self.group.name,
                recipient,
                ttl=self.config.link_ttl,
                question_id=question_id if option is not None else None,
                option=option,
            )
            minted[(question_id, option)] = f"{base}/a/{token}"
        return lambda question_id, option: minted.get((question_id, option))

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
        # A recipient the route does not allow to answer (copied for information) is
        # told so, and gets no links: a link would let them answer all the same.
        allowed = route.allows(recipient)
        message = compose.question_message(
            request,
            self._envelope(request_id, recipient),
            await self._links(request, recipient) if allowed else None,
            may_answer=allowed,
        )
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
        if route is None or not route.allows(recipient):
            return  # copied for information: nobody waits for their answer
        first = self._question_id(request_id, recipient)
        message = compose.question_message(
            request,
            self._envelope(request_id, recipient, in_reply_to=first),
            await self._links(request, recipient),
            preface=[compose.REMINDER, ""],
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
                request, envelope, await self._links(request, to), preface=lines, in_thread=True
            )
        else:
            title = compose.subject(request.questions) if request else "[askq] your reply"
            message = compose.note_message(envelope, f"Re: {title}", lines)
        try:
            await self.mailer.send(message, sender=self.config.from_address, recipient=to)
        except MailRefused as exc:  # will not change by retrying; nothing else to do
            log.warning("note about %s to %s refused: %s", request_id, to, exc)
