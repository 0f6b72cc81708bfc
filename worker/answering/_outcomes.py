"""What one replica of a group did, as metrics and log lines: each offer's decision,
each request that ended for the group (answered here, released, or retracted because it
settled elsewhere), each reminder; and the group's answers and releases through its
`GroupHandle` (`CountedAnswering`), counted, logged and traced the same way."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from ..protocol import _recorder, _tracing
from ..protocol._errors import AskError
from ..protocol._models import Answers, Offer, Retraction
from ..protocol._replies import Reply
from ..protocol._text import visible
from ..redis._requests import Requests
from ..seam._answering import Answering

log = logging.getLogger("askq.runtime")


class Outcomes:
    """One replica's record of what it did (the group, its tier)."""

    def __init__(self, group: str, priority: int, requests: Requests) -> None:
        self.group = group
        self.priority = priority
        self.requests = requests

    def decided(self, offer: Offer, decision: str, started: float) -> None:
        seconds = time.monotonic() - started
        _recorder.recorder.decided(self.group, decision, seconds)
        if decision == "declined":
            _recorder.recorder.passed_on(self.group, self.priority, "declined")
        if not log.isEnabledFor(logging.INFO):
            return
        log.info(
            "%s %s %s (tier %d, %.1f ms)",
            self.group,
            decision,
            offer.request_id,
            self.priority,
            seconds * 1000,
            extra={
                "askq": {
                    "event": "decision",
                    "group": self.group,
                    "request": offer.request_id,
                    "tier": self.priority,
                    "decision": decision,
                    "ms": round(seconds * 1000, 3),
                }
            },
        )

    def settled(self, request_id: str, outcome: str, by: str, created_ms: int | None) -> None:
        """A request this group held ended for it: answered here, or retracted."""
        seconds = _recorder.seconds_since(created_ms)
        _recorder.recorder.settled(self.group, outcome, seconds)
        if outcome in ("released", "escalated"):
            _recorder.recorder.passed_on(self.group, self.priority, outcome)
        if not log.isEnabledFor(logging.INFO):
            return
        log.info(
            "%s: %s %s%s after %.1f s",
            self.group,
            request_id,
            outcome,
            f" by {visible(by)}" if by else "",
            seconds,
            extra={
                "askq": {
                    "event": "settlement",
                    "group": self.group,
                    "request": request_id,
                    "outcome": outcome,
                    "by": by,
                    "seconds": round(seconds, 3),
                }
            },
        )

    async def settled_here(self, request_id: str, outcome: str, by: str) -> None:
        """An answer or release through the GroupHandle landed."""
        created: int | None = None
        if _recorder.recorder.enabled or log.isEnabledFor(logging.INFO):
            with contextlib.suppress(AskError):  # cached for offers read here
                created = (await self.requests.request(request_id)).created_ms
        self.settled(request_id, outcome, by, created)

    def retracted(self, offer: Offer, retraction: Retraction) -> None:
        self.settled(
            offer.request_id,
            _recorder.outcome_of(retraction.state.value, retraction.code),
            retraction.by or "",
            offer.created_ms,
        )

    def reminded(self, offer: Offer) -> None:
        _recorder.recorder.reminded(self.group)
        log.info(
            "%s: reminding %s",
            self.group,
            offer.request_id,
            extra={"askq": {"event": "remind", "group": self.group, "request": offer.request_id}},
        )


class CountedAnswering(Answering):
    """The group's answers and releases (from any replica, through its GroupHandle)
    counted, logged and traced as the group's outcomes."""

    def __init__(self, answering: Answering, requests: Requests, outcomes: Outcomes) -> None:
        super().__init__(answering.scripts, answering.requests)
        self._inner = answering  # with several shards, one that routes by request id
        self._requests = requests  # the seam's (with several shards, every shard's)
        self._outcomes = outcomes

    async def accept(self, offer: Offer) -> bool:
        return await self._inner.accept(offer)

    async def decline(self, request_id: str, group: str, tier: int, offer_id: str) -> Reply:
        return await self._inner.decline(request_id, group, tier, offer_id)

    async def claim_and_answer(self, offer: Offer, answers: Any, *, by: str) -> Answers:
        return await self._inner.claim_and_answer(offer, answers, by=by)

    async def answer(
        self, request_id: str, group: str, answers: Any, *, by: str, tier: int | None = None
    ) -> Answers:
        trace = None
        if _tracing.ENABLED:
            with contextlib.suppress(AskError):  # cached for offers read here
                trace = (await self._requests.request(request_id)).trace
        with _tracing.joined("askq.answer", trace, request_id=request_id, group=group, by=by):
            valid = await self._inner.answer(request_id, group, answers, by=by, tier=tier)
        await self._outcomes.settled_here(request_id, "answered", by)
        return valid

    async def release(self, request_id: str, group: str) -> bool:
        released = await self._inner.release(request_id, group)
        if released:
            await self._outcomes.settled_here(request_id, "released", "")
        return released
