"""What a click, a select or a modal does (a MESSAGE_COMPONENT or MODAL_SUBMIT
interaction), at whichever replica Discord delivered it to, and the response it gets.

Everything an interaction needs is in Redis (the request, the group's claim, the
message's record, a clicker's draft) or in the interaction itself (the component's
`custom_id`, the values chosen or typed), none of it in the replica that posted the
message. Who may answer is checked on every interaction; a refusal, a late click or a
missing answer gets a word that only the clicker sees (an ephemeral message), and
changes nothing.

Discord waits 3 seconds for the response. An answer is given `ACK_SECONDS` to land:
then the response is DEFERRED_UPDATE_MESSAGE (type 6) and the message is edited in
place through the send queue; a refusal is an ephemeral message. An answer slower than
that (Redis far away) is acknowledged with type 6 all the same, and goes on: a refusal
then reaches the clicker as an ephemeral follow-up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

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

from . import _ids as ids
from . import _messages as messages
from ._messages import Outcome
from ._rest import DiscordRest
from ._routes import SNOWFLAKE, Routes
from ._state import DiscordStore
from ._text import cut, escape

log = logging.getLogger("askq.discord")

ACK_SECONDS = 2.0  # of Discord's 3: what is left is for the network
HEADER_SHOWN_MAX = 60
ERROR_SHOWN_MAX = 600
COMPONENT, MODAL_SUBMIT = 3, 5  # interaction types
DEFERRED_UPDATE, CHANNEL_MESSAGE, MODAL = 6, 4, 9  # response types

NOT_LISTED = "You are not on the list of people who may answer this question."
EXPIRED = "This question has expired: nothing was recorded."
NOT_OURS = "This message is not one of askq's."
WRONG_WORKER = (
    "Your click reached another askq worker than the one that posted this question, so"
    " nothing was recorded. Please tell whoever runs askq: each askq Discord group needs an"
    " application of its own."
)

Response = dict[str, Any]


def deferred() -> Response:
    return {"type": DEFERRED_UPDATE}


def say(text: str) -> Response:
    return {"type": CHANNEL_MESSAGE, "data": messages.ephemeral(text)}


def clicker(interaction: dict[str, Any]) -> tuple[str | None, str | None, list[str]]:
    """(user id, display name, role ids): a server's member, or a DM's user."""
    member = interaction.get("member")
    user = member.get("user") if isinstance(member, dict) else interaction.get("user")
    roles = member.get("roles") if isinstance(member, dict) else None
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        return None, None, []
    if not SNOWFLAKE.match(user["id"]):  # it becomes part of a draft's key
        return None, None, []
    name = user.get("global_name") or user.get("username")
    return (
        user["id"],
        name if isinstance(name, str) else None,
        [r for r in roles or () if isinstance(r, str)] if isinstance(roles, list) else [],
    )


def typed(data: dict[str, Any]) -> dict[int, str]:
    """A modal's text inputs by question (`c<i>`), wherever Discord nests them (an
    action row's `components`, a label's `component`)."""
    found: dict[int, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            cid, value = node.get("custom_id"), node.get("value")
            if isinstance(cid, str) and isinstance(value, str) and cid[:1] == "c":
                if cid[1:].isdigit() and int(cid[1:]) < messages.MODAL_INPUTS_MAX:
                    found[int(cid[1:])] = value
            walk(node.get("components"))
            walk(node.get("component"))

    walk(data.get("components"))
    return found


def build_answers(
    questions: list[Question], choices: dict[int, list[int]], custom: dict[int, str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Answers from the choices and typed texts, and the headers still unanswered."""
    answers: list[dict[str, Any]] = []
    missing: list[str] = []
    for index, question in enumerate(questions):
        chosen = sorted(set(choices.get(index, ())))
        labels = [question.options[i].label for i in chosen if i < len(question.options)]
        text = custom.get(index, "").strip() or None
        answer: dict[str, Any] = {"id": question.id, "selected": labels}
        if not question.multi_select:
            # Single-select: custom text overrides a choice (the contract's rule).
            answer["selected"] = [] if text else labels[:1]
        if text:
            answer["custom"] = text
        if question.options and not question.multi_select and not answer["selected"] and not text:
            missing.append(question.header)
        elif not question.options and not text:
            missing.append(question.header)
        answers.append(answer)
    return answers, missing


def _indices(raw: Any, count: int) -> list[int]:
    values = raw if isinstance(raw, list) else []
    picked = [int(v) for v in values if isinstance(v, str) and v.isdigit() and len(v) <= 2]
    return [i for i in picked if i < count]


def _draft_choices(draft: dict[str, str]) -> dict[int, list[int]]:
    choices: dict[int, list[int]] = {}
    for name, value in draft.items():
        if name[:1] == "q" and name[1:].isdigit():
            choices[int(name[1:])] = [int(v) for v in value.split(",") if v.isdigit()]
    return choices


def refusal_text(exc: AskError, settled_by: str | None, settled: bool) -> str:
    if settled and settled_by is not None:
        return f"Already {escape(answered_by(settled_by))}. Nothing was recorded."
    if exc.code is ErrorCode.ALREADY_SETTLED:
        return (
            "Already answered — this question is"
            f" {escape(cut(exc.message, ERROR_SHOWN_MAX))}. Nothing was recorded."
        )
    if exc.code is ErrorCode.NOT_CLAIMED:
        return "This question was passed on to other people: nothing was recorded here."
    return EXPIRED


class InteractionHandler:
    def __init__(
        self, group: GroupHandle, store: DiscordStore, rest: DiscordRest, routes: Routes
    ) -> None:
        self.group = group
        self.store = store
        self.rest = rest
        self.routes = routes
        self._late: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Let answers still settling after their deferred response finish (bounded)."""
        if self._late:
            await asyncio.wait(self._late, timeout=5)

    async def handle(self, interaction: dict[str, Any]) -> Response:
        """The interaction response; never raises."""
        data = interaction.get("data")
        data = data if isinstance(data, dict) else {}
        try:
            action = ids.parse(data.get("custom_id"))
        except ids.MalformedId as exc:
            log.warning("malformed Discord component: %s", exc)
            return say(NOT_OURS)
        if action is None:
            return say(NOT_OURS)
        try:
            return await self._on_action(interaction, data, action)
        except Exception:  # noqa: BLE001 - a bad click must not stop the worker
            log.exception("Discord interaction on %s failed", visible(action.request_id))
            return say("askq could not handle your click; please try again.")

    async def _on_action(
        self, interaction: dict[str, Any], data: dict[str, Any], action: ids.Action
    ) -> Response:
        if action.tag != ids.group_tag(self.group.name):
            log.warning(
                "a Discord click on another group's message reached group %s and was refused:"
                " each askq Discord group needs an application of its own",
                self.group.name,
            )
            return say(WRONG_WORKER)
        try:
            request = await self.group.request(action.request_id)
        except AskError as exc:
            if exc.code not in (ErrorCode.NOT_FOUND, ErrorCode.INVALID_REQUEST):
                raise
            return say(EXPIRED)
        user, name, roles = clicker(interaction)
        route = self.routes.match(request.scope)
        if route is None or user is None or not route.allows(user, roles):
            log.warning(
                "Discord user %s may not answer %s; refused", visible(str(user)), request.id
            )
            return say(NOT_LISTED)
        questions = request.questions
        if action.verb == ids.MODAL:
            if not await self.group.holds(request.id):
                return await self._settled_notice(request)
            return {"type": MODAL, "data": messages.modal(request, self.group.name)}
        if action.verb == ids.PICK:
            assert action.question is not None and action.option is not None
            if action.question >= len(questions) or action.option >= len(
                questions[action.question].options
            ):
                return say("This button does not fit the question; nothing was recorded.")
            question = questions[action.question]
            answers = [{"id": question.id, "selected": [question.options[action.option].label]}]
        elif action.verb == ids.SELECT:
            assert action.question is not None
            if action.question >= len(questions):
                return say("This menu does not fit the question; nothing was recorded.")
            chosen = _indices(data.get("values"), len(questions[action.question].options))
            if not messages.at_once(questions):
                values = ",".join(map(str, chosen))
                await self.store.keep_choice(request.id, user, action.question, values)
                return deferred()  # kept; Submit (or the modal) answers
            answers, missing = build_answers(questions, {0: chosen}, {})
            if missing:
                return say(f"Please choose first: {escape(cut(missing[0], HEADER_SHOWN_MAX))}")
        else:  # Submit, or the modal's texts (with the choices made before)
            choices = _draft_choices(await self.store.draft(request.id, user))
            custom = typed(data) if action.verb == ids.MODAL_SUBMIT else {}
            answers, missing = build_answers(questions, choices, custom)
            if missing:
                heads = ", ".join(escape(cut(h, HEADER_SHOWN_MAX)) for h in missing)
                return say(f"Please answer first: {heads}")
        return await self._answer_in_time(request, answers, user, name, interaction)

    async def _answer_in_time(
        self,
        request: AskRequest,
        answers: list[dict[str, Any]],
        user: str,
        name: str | None,
        interaction: dict[str, Any],
    ) -> Response:
        task = asyncio.create_task(self._answer(request, answers, user, name))
        done, _ = await asyncio.wait({task}, timeout=ACK_SECONDS)
        if task in done:
            return task.result()
        token = interaction.get("token")
        late = asyncio.create_task(self._late_word(task, token if isinstance(token, str) else None))
        self._late.add(late)
        late.add_done_callback(self._late.discard)
        return deferred()

    async def _late_word(self, task: asyncio.Task[Response], token: str | None) -> None:
        try:
            response = await task
        except Exception:  # noqa: BLE001 - logged; the clicker saw nothing happen
            log.exception("a late Discord answer failed")
            return
        if response["type"] == CHANNEL_MESSAGE and token:
            await self.rest.follow_up(token, response["data"])

    async def _answer(
        self, request: AskRequest, answers: list[dict[str, Any]], user: str, name: str | None
    ) -> Response:
        by = messages.discord_by(user, name)
        try:
            accepted = await self.group.answer(request.id, answers, by=by)
        except AskError as exc:
            log.info("Discord answer to %s by %s refused: %s", request.id, user, exc)
            if exc.code in FINAL_REFUSALS:
                settlement = await self.group.settlement(request.id)
                settled = settlement is not None and settlement.state == "ANSWERED"
                await self.group.send("update_message", request_id=request.id)  # stale?
                return say(refusal_text(exc, settlement.by if settlement else None, settled))
            if exc.code is ErrorCode.INVALID_REQUEST:
                return say(
                    f"Your answer was not accepted: {escape(cut(exc.message, ERROR_SHOWN_MAX))}"
                )
            return say(f"Could not record your answer ({exc.code.value}); please try again.")
        outcome = Outcome("ANSWERED", by=by, name=name, answers=tuple(accepted.answers))
        await self.store.set_outcome(request.id, outcome, overwrite=True)
        await self.group.send("update_message", request_id=request.id)
        return deferred()

    async def _settled_notice(self, request: AskRequest) -> Response:
        settlement = await self.group.settlement(request.id)
        if settlement is not None and settlement.state == "ANSWERED" and settlement.by:
            return say(f"Already {escape(answered_by(settlement.by))}. Nothing was recorded.")
        if settlement is None:
            return say("This question was passed on to other people: nothing was recorded here.")
        return say("This question is no longer pending: nothing was recorded.")
