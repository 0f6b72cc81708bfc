"""What an inbound message does, wherever it arrived (the SMTP listener or the HTTP
endpoint, at any replica): everything it needs is in Redis, nothing in the replica
that sent the question.

In this order, and nothing is recorded unless every check passes:
1. it must be addressed to one of our return addresses (`answer+…` / `bounce+…`);
2. a delivery report (bounce) is checked against its address's MAC and recorded for
   the recipient it names; when every recipient of the request failed, the claim is
   released so the waterfall moves on;
3. an automatic reply (out-of-office and the like) is ignored: no answer, no feedback;
4. a reply must come from the sender its address was minted for (the MAC binds
   request, recipient and group: another group's address does not verify here) and
   be allowed by the request's route;
5. its text (quoted history, signature stripped) is read into answers and submitted
   through the group; the person gets feedback in the thread: "Recorded: …",
   "Already answered in Slack by … at …", or "I could not read your answer: …".
A failure of ours (Redis unreachable) is raised: the SMTP listener answers 451, so
the sending server tries again later, and the HTTP endpoint 503.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from askq import (
    FINAL_REFUSALS,
    AskError,
    AskRequest,
    ErrorCode,
    GroupHandle,
    answered_by,
    quoted,
    visible,
)

from ._addresses import ReplyAddresses, ReturnAddress
from ._compose import UNREADABLE, reply_leads
from ._mime import Inbound, auto_reply, bounce, reply_text
from ._reading import Unreadable, read_answers
from ._routes import Routes
from ._state import EmailStore, tag

log = logging.getLogger("askq.email")

# What the channel queues to tell a person something in the thread (EmailAnswerer.send_note).
Notify = Callable[[dict[str, Any]], Awaitable[None]]


# What a person is told of an answer the seam refused after the reading let it through.
NOT_ACCEPTED = (
    "this answer cannot be accepted for this question; reply with an option's number,"
    " or in your own words"
)


def reply_by(sender: str) -> str:
    """How an answer by email reply is attributed."""
    return f"email:{sender}"


def link_by(recipient: str) -> str:
    """How an answer through an email's link is attributed."""
    return f"email-link:{recipient}"


def answered_by_recipient(by: str | None) -> str | None:
    """The recipient who answered, when it was by this channel (reply or link)."""
    for kind in ("email:", "email-link:"):
        if by and by.startswith(kind):
            return by.removeprefix(kind)
    return None


class Verdict(StrEnum):
    RECORDED = "recorded"  # the answer was accepted
    ALREADY = "already settled"  # a valid reply, too late: told who answered
    PASSED_ON = "passed on"  # a valid reply, after the question moved on from this group
    UNREADABLE = "unreadable"  # a valid reply we could not read: told why
    IGNORED = "ignored"  # an automatic reply, a delay notice, a repeat
    BOUNCED = "bounce recorded"
    REFUSED = "refused"  # not ours, not authentic, not allowed: nothing recorded


@dataclass(frozen=True)
class Received:
    verdict: Verdict
    detail: str = ""

    @property
    def smtp_reply(self) -> str:
        # One line of ASCII: the detail may repeat a sender's address.
        detail = " ".join(self.detail.split())[:200].encode("ascii", "replace").decode()
        if self.verdict is Verdict.REFUSED:
            return f"550 5.7.1 {detail or 'refused'}"
        return f"250 2.0.0 {self.verdict.value}"


def answers_summary(request: AskRequest, answers: list[dict[str, Any]]) -> str:
    parts = []
    for question, answer in zip(request.questions, answers, strict=True):
        chosen = [visible(label) for label in answer.get("selected", [])]
        if answer.get("custom"):
            chosen.append(quoted(answer["custom"], 200))
        prefix = f"{visible(question.header)}: " if len(request.questions) > 1 else ""
        parts.append(prefix + ", ".join(chosen))
    return "; ".join(parts)


class Inbox:
    def __init__(
        self,
        group: GroupHandle,
        store: EmailStore,
        addresses: ReplyAddresses,
        routes: Routes,
        notify: Notify,
    ) -> None:
        self.group = group
        self.store = store
        self.addresses = addresses
        self.routes = routes
        self.notify = notify

    async def receive(self, inbound: Inbound) -> Received:
        ours = [a for r in inbound.recipients if (a := self.addresses.parse(r)) is not None]
        if not ours:
            return self._refused(inbound, "not addressed to a reply address of this askq")
        address = ours[0]
        report = bounce(inbound)
        if report is not None:
            return await self._bounce(address, report.failed, report.diagnostic)
        why = auto_reply(inbound)
        if why is not None:
            log.info("automatic reply for %s ignored (%s)", address.request_id, why)
            return Received(Verdict.IGNORED, f"automatic reply ({why})")
        if address.kind != "answer":
            return Received(Verdict.IGNORED, "not a delivery report")
        sender = inbound.sender
        if sender is None:
            return self._refused(inbound, "no single From address")
        if not self.addresses.verifies(address, sender):
            return self._refused(inbound, f"this reply address was not sent to {sender}")
        try:
            request = await self.group.request(address.request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            await self._tell(inbound, address, ["This question has expired: nothing was recorded."])
            return Received(Verdict.ALREADY, "expired")
        route = self.routes.match(request.scope)
        if route is None or not route.allows(sender):
            return self._refused(inbound, f"{sender} may not answer this question")
        if inbound.message_id and not await self.group.store.once(
            f"in:{tag(inbound.message_id)}", self.store.ttl
        ):
            return Received(Verdict.IGNORED, "this reply was read already")
        try:
            return await self._answer(inbound, address, request, sender)
        except BaseException:
            if inbound.message_id:  # not read after all: a resent copy may try again
                await self.group.store.forget_once(f"in:{tag(inbound.message_id)}")
            raise

    async def _answer(
        self, inbound: Inbound, address: ReturnAddress, request: AskRequest, sender: str
    ) -> Received:
        text = reply_text(inbound.message, reply_leads(request.questions))
        try:
            answers = read_answers(request.questions, text)
        except Unreadable as exc:
            return await self._unreadable(inbound, address, exc.reason)
        by = reply_by(sender)
        try:
            await self.group.answer(request.id, answers, by=by)
        except AskError as exc:
            if exc.code is ErrorCode.INVALID_REQUEST:  # the reading's checks let it through
                log.info("email answer to %s refused: %s", request.id, exc.message)
                return await self._unreadable(inbound, address, NOT_ACCEPTED)
            if exc.code not in FINAL_REFUSALS:
                raise
            await self._tell(inbound, address, [await self._too_late(request.id, exc)])
            log.info("email answer to %s by %s refused: %s", request.id, sender, exc.message)
            # Not claimed: pending still, with another group (escalated, given back).
            moved = exc.code is ErrorCode.NOT_CLAIMED
            return Received(Verdict.PASSED_ON if moved else Verdict.ALREADY, exc.message)
        await self.store.record_outcome(request.id, "ANSWERED", by, overwrite=True)
        summary = answers_summary(request, answers)
        await self._tell(inbound, address, [f"Recorded: {summary}", "", "Thank you."])
        log.info("email answer to %s by %s recorded", request.id, sender)
        return Received(Verdict.RECORDED, summary)

    async def _too_late(self, request_id: str, exc: AskError) -> str:
        outcome = await self.store.outcome(request_id)
        settlement = await self.group.settlement(request_id)
        if settlement is not None and settlement.state == "ANSWERED":
            answered = visible(answered_by(settlement.by)) if settlement.by else "answered"
            when = f" at {outcome.when()}" if outcome and outcome.at else ""
            return f"Already {answered}{when}: your reply was not recorded."
        if exc.code is ErrorCode.ALREADY_SETTLED:  # cancelled (and why), or failed
            detail = visible(exc.message.removeprefix("already settled: "))
            return f"This question was {detail}: your reply was not recorded."
        if exc.code is ErrorCode.NOT_CLAIMED:
            return (
                "This question was passed on to other people before your reply came:"
                " your reply was not recorded. If it reached you again, reply to that message."
            )
        return f"Your reply was not recorded: {visible(exc.message)}."

    async def _unreadable(self, inbound: Inbound, address: ReturnAddress, reason: str) -> Received:
        lines = [f"{UNREADABLE} {visible(reason)}.", ""]
        await self._tell(inbound, address, lines, with_question=True)
        return Received(Verdict.UNREADABLE, reason)

    async def _bounce(self, address: ReturnAddress, failed: bool, diagnostic: str) -> Received:
        if not failed:
            return Received(Verdict.IGNORED, "a delay notice")
        try:
            request = await self.group.request(address.request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            return Received(Verdict.IGNORED, "a bounce for an expired request")
        route = self.routes.match(request.scope)
        recipients = route.to if route else ()
        recipient = next((r for r in recipients if self.addresses.verifies(address, r)), None)
        if recipient is None:
            log.warning("a bounce for %s that no recipient's address verifies", request.id)
            return Received(Verdict.REFUSED, "the bounce address does not verify")
        log.warning("email to %s about %s bounced: %s", recipient, request.id, visible(diagnostic))
        await self.store.record_bounce(request.id, recipient, visible(diagnostic)[:300])
        await give_back_if_undeliverable(self.group, self.store, request.id, recipients)
        return Received(Verdict.BOUNCED, recipient)

    async def _tell(
        self,
        inbound: Inbound,
        address: ReturnAddress,
        lines: list[str],
        *,
        with_question: bool = False,
    ) -> None:
        assert inbound.sender is not None
        await self.notify(
            {
                "request_id": address.request_id,
                "to": inbound.sender,
                "lines": lines,
                "in_reply_to": inbound.message_id,
                "references": list(inbound.references),
                "with_question": with_question,
            }
        )

    def _refused(self, inbound: Inbound, why: str) -> Received:
        log.warning(
            "inbound mail from %s refused: %s", visible(inbound.sender or "(no sender)"), why
        )
        return Received(Verdict.REFUSED, why)


async def give_back_if_undeliverable(
    group: GroupHandle, store: EmailStore, request_id: str, recipients: tuple[str, ...]
) -> bool:
    """Release the claim once the question failed to reach every recipient (refused
    or bounced), so the waterfall moves on. True when it was given back."""
    deliveries = await store.deliveries(request_id)
    if not recipients or not all(deliveries.get(r, "").startswith("failed") for r in recipients):
        return False
    log.warning("email could reach none of the recipients of %s; giving it back", request_id)
    try:
        return await group.release(request_id)
    except AskError as exc:  # settled or moved on meanwhile: nothing to give back
        log.info("release of %s: %s", request_id, exc.message)
        return False
