"""The group side of the state machine: accept, decline, release, answer.

Any replica of a group may call these for the group (a claim belongs to the group, not
to the replica that showed the question). An answer is validated against the request's
questions first (INVALID_REQUEST naming what is wrong), then written by the script,
which refuses a late or duplicate one (ALREADY_SETTLED, "answered by …"). An answer
whose reply was lost (a timeout, a failover) is sent again until Redis answers
(`_resend.py`); a repeat of one that landed is the group's answer, not a refusal.
"""

from __future__ import annotations

from typing import Any

from ..protocol._models import Answers, Offer, Settlement, parse_answers
from ..protocol._replies import Reply, refusal
from ..redis._requests import Requests
from ..redis._resend import repeated
from ..redis._scripts import Scripts


class Answering:
    def __init__(self, scripts: Scripts, requests: Requests) -> None:
        self.scripts = scripts
        self.requests = requests

    async def accept(self, offer: Offer) -> bool:
        """Claim the offer for the group. False when it is no longer the group's to take."""
        reply = await self.scripts.accept(offer.request_id, offer.group, offer.tier, offer.offer_id)
        return reply.kind is Reply.CLAIMED

    async def decline(self, request_id: str, group: str, tier: int, offer_id: str) -> Reply:
        """The group will not take offer entry `offer_id`; the last decline of a tier
        moves it on. CLAIMED: the group holds a claim on it, which a decline keeps."""
        return (await self.scripts.decline(request_id, group, tier, offer_id)).kind

    async def release(self, request_id: str, group: str) -> bool:
        """Give back the group's claim; the last release of a tier moves it on."""
        return (await self.scripts.release(request_id, group)).kind is Reply.RELEASED

    async def answer(
        self, request_id: str, group: str, answers: Any, *, by: str, tier: int | None = None
    ) -> Answers:
        """Submit a human's answer on behalf of a group holding the claim (at `tier`,
        its priority, when known). Raises INVALID_REQUEST naming the problem,
        ALREADY_SETTLED for a late or duplicate answer, NOT_CLAIMED when the group holds
        no claim, NOT_FOUND when there is no such request."""
        valid, body = await self._validated(request_id, answers, by)
        reply = await repeated(
            lambda resent: self.scripts.answer(request_id, group, body, by, tier, resent=resent),
            f"answer to {request_id}",
        )
        if reply.kind is not Reply.ANSWERED:
            raise refusal(reply, request_id)
        return valid

    async def claim_and_answer(self, offer: Offer, answers: Any, *, by: str) -> Answers:
        """Claim an offer and answer it in one atomic step (a group that answers without
        asking anyone). Raises like `answer`."""
        valid, body = await self._validated(offer.request_id, answers, by)
        reply = await repeated(
            lambda resent: self.scripts.claim_answer(
                offer.request_id, offer.group, offer.tier, offer.offer_id, body, by, resent=resent
            ),
            f"answer to {offer.request_id}",
        )
        if reply.kind is not Reply.ANSWERED:
            raise refusal(reply, offer.request_id)
        return valid

    async def _validated(self, request_id: str, answers: Any, by: str) -> tuple[Answers, str]:
        request = await self.requests.request(request_id)
        valid = parse_answers(request.questions, answers)
        body = Settlement(state="ANSWERED", answers=valid.answers, by=by)
        return valid, body.model_dump_json(exclude_none=True)
