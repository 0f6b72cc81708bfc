"""What a click on a card does (an `adaptiveCard/action` invoke), at whichever replica
Teams delivered it to, and the card it gets back.

Everything a click needs is in Redis (the request, the group's claim, the card's
record) or in the click itself (Teams sends every input's value with it), none of it in
the replica that posted the card. Who may answer is checked on every click; a refusal,
a late click or a missing answer gets the card back with a notice that only the
clicker sees, and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from microsoft_teams.api.activities.invoke.adaptive_card.action import AdaptiveCardInvokeActivity

from askq import (
    FINAL_REFUSALS,
    AskError,
    AskRequest,
    ErrorCode,
    GroupHandle,
    Question,
    answered_by,
    visible,
)

from . import _cards as cards
from . import _ids as ids
from ._cards import Card, Outcome
from ._connector import Connector
from ._plain import cut
from ._routes import Route, Routes
from ._state import PostedCard, TeamsStore

log = logging.getLogger("askq.teams")

CARD = "application/vnd.microsoft.card.adaptive"
MESSAGE = "application/vnd.microsoft.activity.message"
ERROR = "application/vnd.microsoft.error"
HEADER_SHOWN_MAX = 60
ERROR_SHOWN_MAX = 600

NOT_LISTED = "You are not on the list of people who may answer this question."
EXPIRED = "This question has expired: nothing was recorded."
WRONG_WORKER = (
    "Your click reached another askq worker than the one that posted this question, so"
    " nothing was recorded. Please tell whoever runs askq: each askq Teams group needs a"
    " bot of its own."
)


def card_response(card: Card) -> dict[str, Any]:
    return {"statusCode": 200, "type": CARD, "value": card}


def message_response(text: str) -> dict[str, Any]:
    return {"statusCode": 200, "type": MESSAGE, "value": text}


def error_response(status: int, message: str) -> dict[str, Any]:
    code = "BadRequest" if status == 400 else "InternalServerError"
    return {"statusCode": status, "type": ERROR, "value": {"code": code, "message": message}}


def build_answers(
    questions: list[Question], action: ids.Action
) -> tuple[list[dict[str, Any]], list[str]]:
    """Answers from a submitted card's inputs, and the headers still unanswered."""
    answers: list[dict[str, Any]] = []
    missing: list[str] = []
    for index, question in enumerate(questions):
        chosen = sorted(set(action.choices.get(index, ())))
        labels = [question.options[i].label for i in chosen if i < len(question.options)]
        custom = action.custom.get(index, "").strip() or None
        answer: dict[str, Any] = {"id": question.id, "selected": labels}
        if not question.multi_select:
            # Single-select: custom text overrides a choice (the contract's rule).
            answer["selected"] = [] if custom else labels[:1]
        if custom:
            answer["custom"] = custom
        if question.options and not question.multi_select and not answer["selected"] and not custom:
            missing.append(question.header)
        elif not question.options and not custom:
            missing.append(question.header)
        answers.append(answer)
    return answers, missing


def _refusal_text(exc: AskError, settled_by: str | None, settled: bool) -> str:
    if settled and settled_by is not None:
        return f"Already {answered_by(settled_by)}. Nothing was recorded."
    if exc.code is ErrorCode.ALREADY_SETTLED:
        return (
            "Already answered — this question is"
            f" {cut(exc.message, ERROR_SHOWN_MAX)}. Nothing was recorded."
        )
    if exc.code is ErrorCode.NOT_CLAIMED:
        return "This question was passed on to other people: nothing was recorded here."
    return EXPIRED


class ActionHandler:
    def __init__(
        self, group: GroupHandle, store: TeamsStore, connector: Connector, routes: Routes
    ) -> None:
        self.group = group
        self.store = store
        self.connector = connector
        self.routes = routes

    async def handle(self, activity: AdaptiveCardInvokeActivity) -> dict[str, Any]:
        """The invoke response: a card for the clicker, or a message; never raises."""
        value = activity.value.action
        try:
            action = ids.parse_action(value.verb, value.data)
        except ids.MalformedAction as exc:
            log.warning("malformed Teams action: %s", exc)
            return error_response(400, f"malformed askq action: {exc}")
        if action is None:
            return message_response("This card is not one of askq's.")
        try:
            return await self._on_action(activity, action)
        except Exception:  # noqa: BLE001 - a bad click must not stop the worker
            log.exception("Teams action on %s failed", visible(action.request_id))
            return message_response("askq could not handle your click; please try again.")

    async def _on_action(
        self, activity: AdaptiveCardInvokeActivity, action: ids.Action
    ) -> dict[str, Any]:
        if action.group != self.group.name:
            log.warning(
                "a Teams click on group %s's card reached group %s and was refused: each"
                " askq Teams group needs a bot (and messaging endpoint) of its own",
                visible(action.group),
                self.group.name,
            )
            return message_response(WRONG_WORKER)
        try:
            request = await self.group.request(action.request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            return message_response("This question has expired.")
        posted = await self.store.card(request.id)
        if action.verb == ids.REFRESH:
            return card_response(await self.current(request, posted))
        user = activity.from_
        object_id = user.aad_object_id
        route = self.routes.match(request.scope)
        if route is None or object_id is None or not await self._allowed(route, activity):
            log.warning(
                "Teams user %s may not answer %s; refused",
                visible(object_id or user.id),
                request.id,
            )
            return card_response(await self.current(request, posted, notice=NOT_LISTED))
        questions = request.questions
        if action.verb == ids.PICK:
            assert action.question is not None and action.option is not None
            if action.question >= len(questions) or action.option >= len(
                questions[action.question].options
            ):
                return error_response(400, "the action does not fit the question")
            question = questions[action.question]
            # A button is its option; the text box beside it goes with "Send my answer".
            answers = [{"id": question.id, "selected": [question.options[action.option].label]}]
        else:
            answers, missing = build_answers(questions, action)
            if missing:
                heads = ", ".join(cut(h, HEADER_SHOWN_MAX) for h in missing)
                return card_response(
                    cards.question_card(
                        request,
                        self.group.name,
                        notice=f"Please answer first: {heads}",
                        values=action.values,
                    )
                )
        by = cards.teams_by(object_id, user.name)
        try:
            accepted = await self.group.answer(request.id, answers, by=by)
        except AskError as exc:
            log.info("Teams answer to %s by %s refused: %s", request.id, object_id, exc)
            if exc.code in FINAL_REFUSALS:
                settlement = await self.group.settlement(request.id)
                settled = settlement is not None and settlement.state == "ANSWERED"
                notice = _refusal_text(exc, settlement.by if settlement else None, settled)
                return card_response(await self.current(request, posted, notice=notice))
            if exc.code is ErrorCode.INVALID_REQUEST:
                notice = f"Your answer was not accepted: {cut(exc.message, ERROR_SHOWN_MAX)}"
            else:
                notice = f"Could not record your answer ({exc.code.value}); please try again."
            return card_response(
                cards.question_card(request, self.group.name, notice=notice, values=action.values)
            )
        outcome = Outcome("ANSWERED", by=by, name=user.name, answers=tuple(accepted.answers))
        await self.store.set_outcome(request.id, outcome, overwrite=True)
        await self.group.send("update_message", request_id=request.id)
        return card_response(cards.final_card(request, outcome))

    async def _allowed(self, route: Route, activity: AdaptiveCardInvokeActivity) -> bool:
        object_id = activity.from_.aad_object_id
        if route.allows(object_id):
            return True
        if not route.needs_upn or object_id is None:
            return False
        upn = await self.store.upn(object_id)
        if upn is None and activity.service_url:
            conversation = activity.conversation.id.split(";")[0]
            try:
                upn = await self.connector.upn(
                    activity.service_url, conversation, activity.from_.id
                )
            except Exception as exc:  # noqa: BLE001 - unknown is "not listed", and said so
                log.warning("could not read the UPN of %s: %s", visible(object_id), exc)
                return False
            if upn:
                await self.store.remember_upn(object_id, upn)
        return route.allows(object_id, upn)

    async def current(
        self, request: AskRequest, posted: PostedCard, *, notice: str | None = None
    ) -> Card:
        """The card as it should be now: the question while this group holds it, else
        what became of it."""
        outcome = posted.outcome
        if outcome is None and await self.group.holds(request.id):
            return cards.question_card(request, self.group.name, notice=notice)
        settlement = await self.group.settlement(request.id)
        if outcome is None:
            if settlement is None:  # still pending, with another group
                outcome = Outcome("OFFERED")
            else:
                outcome = Outcome(
                    settlement.state,
                    code=settlement.code.value if settlement.code else None,
                    by=settlement.by,
                    answers=tuple(settlement.answers or ()),
                )
        elif outcome.state == "ANSWERED" and not outcome.answers and settlement is not None:
            outcome = replace(outcome, answers=tuple(settlement.answers or ()))
        return cards.final_card(request, outcome, notice=notice)
