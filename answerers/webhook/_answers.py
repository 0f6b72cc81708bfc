"""An answer POSTed to the group's callback, at whichever replica it reached.

Checked in this order, each refusal recording nothing: the path names this group and a
request id; the bearer token is this group's token for that request (its hash compared
in constant time); the question is not over for this group; the answers fit the
questions (`askq.parse_answers`: 422 names what is wrong); the token is then used, once,
and the answer submitted. A token used for an answer that did not land for a reason
worth retrying (Redis out of reach) may be used again; one refused for good may not.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from askq import FINAL_REFUSALS, AskError, ErrorCode, GroupHandle, parse_answers, visible

from . import _events as events
from . import _signing as signing
from ._endpoint import Reply, refusal
from ._events import Outcome
from ._state import WebhookStore

log = logging.getLogger("askq.webhook")

REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # askq's request ids
BY_MAX = 200
UNAUTHORIZED = (
    "not this question's answer token: send the answer.token of its question.asked event"
    " as 'Authorization: Bearer <token>'"
)


def _over(outcome: Outcome) -> Reply:
    text = outcome.text()
    if outcome.state == "OFFERED":
        text += ": this token no longer answers it"
    return refusal(409, "already_settled", f"{text}. Nothing was recorded.")


class AnswerHandler:
    def __init__(self, group: GroupHandle, store: WebhookStore) -> None:
        self.group = group
        self.store = store

    async def handle(self, group: str, request_id: str, token: str | None, raw: Any) -> Reply:
        if group != self.group.name or not REQUEST_ID.fullmatch(request_id):
            return refusal(404, "not_found", "no such question at this callback")
        if token is None:
            return refusal(401, "unauthorized", UNAUTHORIZED)
        record = await self.store.record(request_id)
        if record.token_hash is None or not signing.same_token(token, record.token_hash):
            log.warning("webhook answer to %s with a wrong token refused", request_id)
            return refusal(401, "unauthorized", UNAUTHORIZED)
        if record.outcome is not None:
            return _over(record.outcome)
        by = raw.get("by")
        if by is not None and (not isinstance(by, str) or not by.strip()):
            return refusal(400, "bad_request", "by: expected the name of who answered (text)")
        name = " ".join((by or self.group.name).split())[:BY_MAX]
        if "answers" not in raw:
            return refusal(422, "invalid_answer", 'answers: missing ({"answers": [...]})')
        try:
            request = await self.group.request(request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            return refusal(404, "not_found", "this question has expired: nothing was recorded")
        try:
            parse_answers(request.questions, raw["answers"])
        except AskError as exc:
            return refusal(422, "invalid_answer", exc.message)
        if not await self.store.use_token(request_id):
            return await self._used(request_id)
        return await self._answer(request_id, raw["answers"], name)

    async def _answer(self, request_id: str, answers: Any, name: str) -> Reply:
        by = events.webhook_by(name)
        try:
            accepted = await self.group.answer(request_id, answers, by=by)
        except AskError as exc:
            log.info("webhook answer to %s refused: %s", request_id, exc)
            if exc.code in FINAL_REFUSALS:
                return await self._used(request_id, exc)
            await self.store.unuse_token(request_id)
            if exc.code is ErrorCode.INVALID_REQUEST:
                return refusal(422, "invalid_answer", exc.message)
            return refusal(503, "unavailable", f"could not record the answer ({exc.code.value})")
        except BaseException:
            await self.store.unuse_token(request_id)
            raise
        outcome = Outcome("ANSWERED", by=by, here=True, answers=tuple(accepted.answers))
        await self.store.set_outcome(request_id, outcome, overwrite=True)
        await self.group.send("post_closed", request_id=request_id)
        log.info("webhook answer to %s by %s accepted", request_id, visible(name))
        return Reply(
            200,
            {
                "status": "answered",
                "answers": [a.model_dump(exclude_none=True) for a in accepted.answers],
            },
        )

    async def _used(self, request_id: str, exc: AskError | None = None) -> Reply:
        """The token was used already, or the answer came too late: say what became of
        the question, in the words Slack and Teams use."""
        record = await self.store.record(request_id)
        if record.outcome is not None:
            return _over(record.outcome)
        settlement = await self.group.settlement(request_id)
        if settlement is not None:
            return _over(
                Outcome(
                    settlement.state,
                    code=settlement.code.value if settlement.code else None,
                    by=settlement.by,
                )
            )
        if exc is not None and exc.code is ErrorCode.NOT_CLAIMED:
            return _over(Outcome("OFFERED"))
        return refusal(409, "already_settled", "this token was used already")
