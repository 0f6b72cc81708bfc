"""What a human's click or modal does, at whichever replica Slack delivered it to.

Everything a click needs is in Redis (the request, the group's claim, the answers in
progress), none of it in the replica that posted the message. Who may answer is
checked on every action; refusals and late clicks get an ephemeral reply that only the
clicker sees, and change nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from askq import (
    FINAL_REFUSALS,
    AskError,
    AskRequest,
    ErrorCode,
    GroupHandle,
    Question,
    Settlement,
    answered_by,
    visible,
)

from . import _blocks as blocks
from ._api import call
from ._interactions import Action, BlockActions, CustomSubmitted, Interaction, SlackUser
from ._mrkdwn import mrkdwn
from ._routes import Routes
from ._state import Picks, SlackStore

log = logging.getLogger("askq.slack")


def build_answers(
    questions: list[Question], picks: Picks
) -> tuple[list[dict[str, Any]], list[str]]:
    """Answers from one user's picks, and the headers of questions still unanswered."""
    answers: list[dict[str, Any]] = []
    missing: list[str] = []
    for index, question in enumerate(questions):
        chosen = sorted(set(picks.chosen.get(index, ())))
        labels = [question.options[i].label for i in chosen if i < len(question.options)]
        custom = picks.custom.get(index, "").strip() or None
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


# An ephemeral's text is mrkdwn: what it repeats of an error message (which quotes
# labels, ids, another channel's `by`) or of the questions is escaped, and bounded.
ERROR_SHOWN_MAX = 1000
HEADER_SHOWN_MAX = 200  # a header's 40 characters, escaped


def _refusal_text(exc: AskError, settlement: Settlement | None) -> str:
    if settlement is not None and settlement.state == "ANSWERED":
        who = mrkdwn(answered_by(settlement.by), ERROR_SHOWN_MAX)  # "answered in Slack by al"
        return f"Already {who}. Nothing was recorded."
    if exc.code is ErrorCode.ALREADY_SETTLED:
        detail = mrkdwn(exc.message, ERROR_SHOWN_MAX)
        return f"Already answered — this question is {detail}. Nothing was recorded."
    if exc.code is ErrorCode.NOT_CLAIMED:
        # Still waiting, with another group (an escalation, a claim given back).
        return "This question was passed on to other people: nothing was recorded here."
    return "This question has expired: nothing was recorded."


WRONG_WORKER = (
    "Your click reached another askq worker than the one that posted this question,"
    " so nothing was recorded. Please tell whoever runs askq: each askq Slack group"
    " needs a Slack app of its own."
)


def _missing_text(headers: list[str]) -> str:
    return "Please answer first: " + ", ".join(mrkdwn(h, HEADER_SHOWN_MAX) for h in headers)


class ClickHandler:
    def __init__(
        self, group: GroupHandle, store: SlackStore, client: AsyncWebClient, routes: Routes
    ) -> None:
        self.group = group
        self.store = store
        self.client = client
        self.routes = routes

    async def handle(self, interaction: Interaction) -> None:
        try:
            if isinstance(interaction, BlockActions):
                for action in interaction.actions:
                    await self._on_action(interaction, action)
            else:
                await self._on_custom(interaction)
        except Exception:  # noqa: BLE001 - a bad click must not stop the worker
            log.exception("Slack interaction failed: %r", interaction)

    async def ephemeral(self, channel: str | None, user: SlackUser, text: str) -> None:
        """Tell only the clicker; best effort (an ephemeral retried later would confuse)."""
        if channel is None:
            log.info("no channel to tell %s: %s", user.id, visible(text))
            return
        try:
            await call(
                "chat.postEphemeral",
                self.client.chat_postEphemeral(channel=channel, user=user.id, text=text),
            )
        except Exception as exc:  # noqa: BLE001
            log.warning("could not tell %s in %s (%s): %s", user.id, channel, exc, visible(text))

    async def _request(
        self, request_id: str, user: SlackUser, channel: str | None
    ) -> AskRequest | None:
        """The request, if this user may answer it here; otherwise say why and None."""
        try:
            request = await self.group.request(request_id)
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            await self.ephemeral(channel, user, "This question has expired.")
            return None
        route = self.routes.match(request.scope)
        if route is None or not route.allows(user.id):
            log.warning("Slack user %s may not answer %s; refused", user.id, request_id)
            await self.ephemeral(
                channel, user, "You are not on the list of people who may answer this question."
            )
            return None
        return request

    async def _not_ours(self, group: str | None, user: SlackUser, channel: str | None) -> bool:
        """A click on another group's message (one Slack app serving two groups, which
        Slack lets reach any of the app's connections): refused, with nothing recorded.
        A message posted before clicks named the group is taken as this group's."""
        if group is None or group == self.group.name:
            return False
        log.warning(
            "a Slack click on group %s's message reached group %s and was refused: Slack"
            " sends an app's clicks to any of its connections, so each askq Slack group"
            " needs a Slack app of its own",
            visible(group),
            self.group.name,
        )
        await self.ephemeral(channel, user, WRONG_WORKER)
        return True

    async def _on_action(self, clicked: BlockActions, action: Action) -> None:
        user, channel = clicked.user, clicked.channel
        if await self._not_ours(action.group, user, channel):
            return
        request = await self._request(action.request_id, user, channel)
        if request is None:
            return
        questions = request.questions
        index = action.question
        if index is not None and (
            index >= len(questions)
            or any(o >= len(questions[index].options) for o in action.options)
        ):
            log.warning("Slack action %r does not fit request %s", action, request.id)
            return
        if action.kind == "pick" and index is not None:
            answer = {
                "id": questions[index].id,
                "selected": [questions[index].options[action.options[0]].label],
            }
            await self.submit(request, user, channel, [answer])
        elif action.kind in ("check", "radio") and index is not None:
            await self.store.choose(request.id, user.id, index, action.options, action.at)
        elif action.kind == "other" and index is not None:
            await self._open_modal(clicked, request, index)
        elif action.kind == "submit":
            picks = await self.store.picks(request.id, user.id)
            for (request_id, question), chosen in clicked.state.items():
                if request_id == request.id:  # what the message showed at the click wins
                    picks.chosen[question] = chosen
            answers, missing = build_answers(questions, picks)
            if missing:
                await self.ephemeral(channel, user, _missing_text(missing))
                return
            await self.submit(request, user, channel, answers)

    async def _open_modal(self, clicked: BlockActions, request: AskRequest, index: int) -> None:
        if clicked.trigger_id is None:
            log.warning("Slack 'Other…' click without trigger_id on %s", request.id)
            return
        picks = await self.store.picks(request.id, clicked.user.id)
        submits = blocks.modal_answers(request.questions)
        metadata = {
            "r": request.id,
            "q": index,
            "c": clicked.channel,
            "ts": clicked.message_ts,
            "g": self.group.name,
        }
        view = blocks.custom_modal(
            request.questions[index],
            metadata,
            submits_answer=submits,
            initial=picks.custom.get(index),
        )
        await call("views.open", self.client.views_open(trigger_id=clicked.trigger_id, view=view))

    async def _on_custom(self, submitted: CustomSubmitted) -> None:
        user, channel = submitted.user, submitted.channel
        if await self._not_ours(submitted.group, user, channel):
            return
        request = await self._request(submitted.request_id, user, channel)
        if request is None or submitted.question >= len(request.questions):
            return
        question = request.questions[submitted.question]
        text = submitted.text.strip()
        if blocks.modal_answers(request.questions):
            if not text:
                return
            picks = await self.store.picks(request.id, user.id)
            picks.custom[submitted.question] = text
            answers, _ = build_answers(request.questions, picks)
            await self.submit(request, user, channel, answers)
            return
        await self.store.write_custom(request.id, user.id, submitted.question, text)
        header = mrkdwn(question.header, HEADER_SHOWN_MAX)
        done = "Noted" if text else "Cleared"
        note = f"{done} your answer to *{header}*."
        await self.ephemeral(channel, user, note + " Press Submit to send all answers.")

    async def submit(
        self,
        request: AskRequest,
        user: SlackUser,
        channel: str | None,
        answers: list[dict[str, Any]],
    ) -> None:
        try:
            accepted = await self.group.answer(request.id, answers, by=user.by)
        except AskError as exc:
            if exc.code in FINAL_REFUSALS:
                settled = None
                if exc.code is ErrorCode.ALREADY_SETTLED:
                    settled = await self.group.settlement(request.id)
                text = _refusal_text(exc, settled)
            elif exc.code is ErrorCode.INVALID_REQUEST:
                text = f"Your answer was not accepted: {mrkdwn(exc.message, ERROR_SHOWN_MAX)}"
            else:
                text = f"Could not record your answer ({exc.code.value}); please try again."
            log.info("Slack answer to %s by %s refused: %s", request.id, user.id, exc)
            await self.ephemeral(channel, user, text)
            return
        outcome = blocks.Outcome(
            "ANSWERED", by=user.by, user=user.id, answers=tuple(accepted.answers)
        )
        await self.store.set_outcome(request.id, outcome, overwrite=True)
        await self.store.forget_picks(request.id, user.id)
        await self.group.send("update_message", request_id=request.id)
