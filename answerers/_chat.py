"""What the chat channels (Slack, Teams, Discord, the webhook) do the same way.

`ChatAnswerer`, the runtime's side: `present` queues the `post_question` send and
`remind` the `post_reminder` one (retried sends, run by any replica); a post that failed
for good gives the question back (released), so the waterfall moves on. `_final` is
what an update shows: the outcome with the settlement's answers, and the request.

`Outcome`, the record of what became of a question as Teams' and Discord's stores keep
it (each channel's subclass adds its own headline); `shown` names the `once` of showing
one outcome of a request.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypeVar

from askq import (
    Answer,
    Answerer,
    AnswererOptions,
    AskError,
    AskRequest,
    ErrorCode,
    Offer,
    Retraction,
)

OptionsT = TypeVar("OptionsT", bound=AnswererOptions)


class _Recorded(Protocol):
    """What `_final` reads of a channel's outcome record (a frozen dataclass)."""

    @property
    def state(self) -> str: ...

    @property
    def answers(self) -> tuple[Answer, ...]: ...


RecordT = TypeVar("RecordT", bound=_Recorded)


class ChatAnswerer(Answerer[OptionsT]):
    """The runtime's side every chat channel has the same (see the module's text)."""

    log: ClassVar[logging.Logger]  # the channel's own logger
    who: ClassVar[str]  # who gives a question back, in the log: "Discord"
    post_failed: ClassVar[str] = "could not post"  # why, once the send gave up

    async def present(self, offer: Offer) -> None:
        await self.group.send("post_question", request_id=offer.request_id)

    async def remind(self, offer: Offer) -> None:
        await self.group.send("post_reminder", request_id=offer.request_id)

    async def send_failed(self, job: str, kwargs: dict[str, Any], error: BaseException) -> None:
        if job == "post_question":
            await self._give_back(kwargs["request_id"], f"{self.post_failed}: {error}")

    def _giver(self) -> str:
        return self.who

    async def _give_back(self, request_id: str, why: str) -> None:
        self.log.warning("%s gives request %s back: %s", self._giver(), request_id, why)
        try:
            await self.group.release(request_id)
        except AskError as exc:  # settled or moved on meanwhile: nothing to give back
            self.log.info("release of %s: %s", request_id, exc.message)

    async def _final(self, request_id: str, outcome: RecordT) -> tuple[RecordT, AskRequest] | None:
        """What the update of a settled request shows: the outcome, with the answers
        from the settlement when the record has none ("answered" heard from elsewhere),
        and the request; None once the request expired (nothing left to show)."""
        if outcome.state == "ANSWERED" and not outcome.answers:
            settlement = await self.group.settlement(request_id)
            if settlement is not None and settlement.answers:
                outcome = replace(outcome, answers=tuple(settlement.answers))  # type: ignore[type-var]
        try:
            request = await self.group.request(request_id)
        except AskError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return None
            raise
        return outcome, request


@dataclass(frozen=True)
class Outcome:
    """What became of a request, as a channel's store records it."""

    state: str  # ANSWERED | CANCELLED | FAILED | OFFERED (escalated)
    code: str | None = None
    by: str | None = None
    name: str | None = None  # the channel's user who answered on its message: their name
    answers: tuple[Answer, ...] = ()
    why: str | None = None  # a cancellation: what happened (askq's words)

    @classmethod
    def retracted(cls: type[OutcomeT], retraction: Retraction) -> OutcomeT:
        """What a retraction says became of it (answered elsewhere, withdrawn, ...)."""
        return cls(
            retraction.state,
            code=retraction.code,
            by=retraction.by,
            why=retraction.why_cancelled,
        )

    def to_json(self) -> str:
        data = {
            "state": self.state,
            "code": self.code,
            "by": self.by,
            "name": self.name,
            "answers": [a.model_dump(exclude_none=True) for a in self.answers],
            "why": self.why,
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls: type[OutcomeT], text: str) -> OutcomeT:
        data = json.loads(text)
        return cls(
            state=data["state"],
            code=data.get("code"),
            by=data.get("by"),
            name=data.get("name"),
            answers=tuple(Answer.model_validate(a) for a in data.get("answers") or ()),
            why=data.get("why"),
        )


OutcomeT = TypeVar("OutcomeT", bound=Outcome)


class _Json(Protocol):
    def to_json(self) -> str: ...


def shown(request_id: str, outcome: _Json) -> str:
    """The `once` name of showing this outcome of the request."""
    return f"shown:{request_id}:" + hashlib.sha256(outcome.to_json().encode()).hexdigest()[:16]
