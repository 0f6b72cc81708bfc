"""The Adaptive Cards of a question: the card that asks, its final state, and what
a click gets back (Universal Actions, schema 1.5).

One question, single-select: a button per option (`Action.Execute`, a click answers),
and a text input with its own button for an answer of one's own. Anything else (a
multi-select, several questions, free text): an `Input.ChoiceSet` per question
(checkboxes, or radio buttons), an `Input.Text` for the custom answer, one Submit, so
the request is answered as one; Teams sends every input's value with the action.

The question card carries a `refresh` action, so Teams asks the bot for the card as it
is now whenever someone opens the conversation (automatically in chats and channels of
up to 60 people, from the card's menu in larger ones): a card answered elsewhere shows
it even if its update is late. The answer to a click is a card too, shown to the
clicker alone (a User-Specific View): it carries a notice ("Already answered ...") the
way Slack's ephemeral messages do.

All agent text is plain TextRuns (`_plain`). Teams refuses messages over about 28 KB,
and a request may hold eight questions of 2,000 characters with ten options each: a
card over `CARD_BUDGET` bytes is built again with shorter texts (descriptions first,
then questions, then labels), each cut one ending in an ellipsis.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from microsoft_teams.cards import (
    ActionSet,
    AdaptiveCard,
    CardElement,
    Choice,
    ChoiceSetInput,
    Container,
    ExecuteAction,
    RefreshDefinition,
    TextInput,
)

from askq import MAX_CUSTOM, RECOMMENDED_SUFFIX, Answer, AskRequest, Question, answered_by

from .. import _chat as chat
from . import _ids as ids
from ._plain import cut, line, paragraphs, run

CARD_VERSION: Final[Literal["1.5"]] = "1.5"
CARD_BUDGET = 24_000  # bytes of card JSON: Teams refuses a message of more than ~28 KB
SUMMARY_MAX = 300  # the notification's text
BY_MAX = 500  # another channel's attribution, a person's name
NOTICE_MAX = 1000
CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"

Card = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """How much of each agent text a card shows."""

    question: int = 2000
    description: int = 500
    label: int = 120
    answer: int = MAX_CUSTOM


# Each next level when a card is over budget; the last fits eight full questions.
LEVELS = (
    Limits(),
    Limits(description=200, answer=1500),
    Limits(question=1000, description=100, answer=600),
    Limits(question=500, description=0, label=80, answer=300),
    Limits(question=250, description=0, label=50, answer=150),
    Limits(question=100, description=0, label=30, answer=60),
)


def card_json(card: AdaptiveCard) -> Card:
    dumped: Card = card.model_dump(by_alias=True, exclude_none=True)
    return dumped


def size(card: Card) -> int:
    """Bytes on the wire (httpx sends JSON as UTF-8, not ASCII escapes)."""
    return len(json.dumps(card, ensure_ascii=False, separators=(",", ":")).encode())


def fit(build: Callable[[Limits], AdaptiveCard]) -> Card:
    """The card of the first level that fits the budget (the last level's regardless)."""
    card: Card = {}
    for limits in LEVELS:
        card = card_json(build(limits))
        if size(card) <= CARD_BUDGET:
            return card
    return card


def answers_at_once(questions: list[Question]) -> bool:
    """One click answers: one single-select question with options."""
    return len(questions) == 1 and bool(questions[0].options) and not questions[0].multi_select


# --- what became of a request ------------------------------------------------------


class Outcome(chat.Outcome):
    """What became of a request, as the final card shows it; `name`: the Teams user
    who answered on this card, their name."""

    def headline(self) -> list[tuple[str, bool]]:
        """The headline as (text, bold) parts; the person's and channel's words as given."""
        if self.state == "ANSWERED":
            if self.name:
                return [("✅ ", False), ("Answered", True), (" by " + self.name, False)]
            if not self.by:
                return [("✅ ", False), ("Answered elsewhere", True)]
            how = answered_by(self.by).removeprefix("answered")  # " in Slack by al"
            return [("✅ ", False), ("Answered", True), (cut(how, BY_MAX), False)]
        if self.state == "CANCELLED":
            why = f" ({cut(self.why, BY_MAX)})" if self.why else ""
            return [("🚫 ", False), ("Cancelled", True), (why, False)]
        if self.state == "FAILED":
            return [("⌛ ", False), ("No longer pending", True)]
        return [("⤴️ ", False), ("Escalated", True), (" to another answerer", False)]

    def headline_text(self) -> str:
        return "".join(text for text, _ in self.headline())


def teams_by(object_id: str, name: str | None) -> str:
    """How an answer given here is attributed: the object id, stable; the name, readable."""
    return f"teams:{object_id}" + (f" ({name})" if name else "")


# --- building blocks -----------------------------------------------------------------


def _notice(text: str) -> Container:
    """A word to the clicker (only they see the card a click gets back)."""
    return Container(style="warning", items=[line(run(cut(text, NOTICE_MAX)))])


def _intro(question: Question, index: int, total: int, limits: Limits) -> list[CardElement]:
    count = f" ({index + 1}/{total})" if total > 1 else ""
    header = line(
        run(question.header + count, weight="Bolder", size="Medium"),
        separator=index > 0,
        spacing="Large" if index else None,
    )
    return [header, *paragraphs(question.question, limits.question)]


def _option_list(question: Question, limits: Limits) -> list[CardElement]:
    """Every option with its description (buttons and choices show the label only)."""
    blocks: list[CardElement] = []
    for option in question.options:
        runs = [run("• "), run(cut(option.label, limits.label), weight="Bolder")]
        if option.description and limits.description:
            runs.append(run(" — " + cut(option.description, limits.description)))
        blocks.append(line(*runs, spacing="None"))
    return blocks


def _asked_by(request: AskRequest) -> CardElement:
    caller = request.caller
    subtle: dict[str, Any] = {"is_subtle": True, "size": "Small"}
    mono: dict[str, Any] = {**subtle, "font_type": "Monospace"}
    return line(
        run("Agent ", **subtle),
        run(caller.agent_id, **mono),
        run(" asks · turn ", **subtle),
        run(caller.turn_id, **mono),
        separator=True,
    )


def _execute(title: str, verb: str, data: dict[str, Any], primary: bool = False) -> ExecuteAction:
    action = ExecuteAction(title=title, verb=verb, data=data)
    if primary:
        action.style = "positive"
    return action


def _controls(
    request: AskRequest,
    group: str,
    index: int,
    at_once: bool,
    limits: Limits,
    values: dict[str, str],
) -> list[CardElement]:
    question = request.questions[index]
    data = ids.action_data(request.id, group)
    blocks: list[CardElement] = []
    if limits.description and any(o.description for o in question.options):
        blocks += _option_list(question, limits)  # buttons and choices show no description
    custom = TextInput(
        id=ids.custom_input(index),
        placeholder="Your answer" if not question.options else "Or type an answer of your own",
        is_multiline=True,
        max_length=MAX_CUSTOM,
    )
    if ids.custom_input(index) in values:
        custom.value = values[ids.custom_input(index)]
    if at_once:
        buttons = [
            _execute(
                cut(option.label, limits.label),
                ids.PICK,
                {**data, ids.QUESTION: index, ids.OPTION: i},
                primary=i == 0 and option.label.endswith(RECOMMENDED_SUFFIX),
            )
            for i, option in enumerate(question.options)
        ]
        blocks.append(ActionSet(actions=list(buttons)))
        blocks.append(custom)
        blocks.append(ActionSet(actions=[_execute("Send my answer", ids.SUBMIT, data)]))
        return blocks
    if question.options:
        chooser = ChoiceSetInput(
            id=ids.choice_input(index),
            style="expanded",
            is_multi_select=question.multi_select,
            wrap=True,
            choices=[
                Choice(title=cut(option.label, limits.label), value=str(i))
                for i, option in enumerate(question.options)
            ],
        )
        if ids.choice_input(index) in values:
            chooser.value = values[ids.choice_input(index)]
        blocks.append(chooser)
    blocks.append(custom)
    return blocks


# --- the cards -------------------------------------------------------------------------


def question_card(
    request: AskRequest,
    group: str,
    *,
    notice: str | None = None,
    values: dict[str, str] | None = None,
) -> Card:
    """The card that asks, for `group` (its actions name it); `notice`: a word to the
    clicker on top; `values`: the inputs as they sent them (kept after a refusal)."""
    questions = request.questions
    at_once = answers_at_once(questions)

    def build(limits: Limits) -> AdaptiveCard:
        body: list[CardElement] = [_notice(notice)] if notice else []
        for index, question in enumerate(questions):
            body += _intro(question, index, len(questions), limits)
            body += _controls(request, group, index, at_once, limits, values or {})
        if not at_once:
            body.append(
                ActionSet(
                    actions=[
                        _execute("Submit", ids.SUBMIT, ids.action_data(request.id, group), True)
                    ]
                )
            )
        body.append(_asked_by(request))
        return AdaptiveCard(
            version=CARD_VERSION,
            body=body,
            refresh=RefreshDefinition(
                action=ExecuteAction(verb=ids.REFRESH, data=ids.action_data(request.id, group))
            ),
        )

    return fit(build)


def _answer_line(answer: Answer, limits: Limits) -> CardElement:
    runs = [run("→ ")]
    for n, label in enumerate(answer.selected):
        if n:
            runs.append(run(", "))
        runs.append(run(cut(label, limits.label), weight="Bolder"))
    if answer.custom is not None:
        runs.append(run((", " if answer.selected else "") + "“"))
        runs.append(run(cut(answer.custom, limits.answer), italic=True))
        runs.append(run("”"))
    if not answer.selected and answer.custom is None:
        runs.append(run("(nothing selected)", italic=True))
    return line(*runs)


def final_card(request: AskRequest, outcome: Outcome, *, notice: str | None = None) -> Card:
    """The card once settled: the questions, what became of them, no actions."""
    answers = {a.id: a for a in outcome.answers}
    questions = request.questions

    def build(limits: Limits) -> AdaptiveCard:
        body: list[CardElement] = [_notice(notice)] if notice else []
        headline = line(
            *[run(text, weight="Bolder" if bold else None) for text, bold in outcome.headline()]
        )
        body.append(Container(style="emphasis", items=[headline]))
        for index, question in enumerate(questions):
            body += _intro(question, index, len(questions), limits)
            if question.id in answers:
                body.append(_answer_line(answers[question.id], limits))
        body.append(_asked_by(request))
        return AdaptiveCard(version=CARD_VERSION, body=body)

    return fit(build)


def summary(request: AskRequest, outcome: Outcome | None = None) -> str:
    """The message's `summary`: what a notification shows (plain text)."""
    first = request.questions[0]
    more = f" (+{len(request.questions) - 1} more)" if len(request.questions) > 1 else ""
    text = f"{first.header}: {first.question}"
    if outcome is not None:
        text = f"{outcome.headline_text()} — {text}"
    return cut(" ".join(text.split()), SUMMARY_MAX - len(more)) + more


def reminder_card() -> Card:
    return card_json(
        AdaptiveCard(
            version=CARD_VERSION,
            body=[line(run("⏰ Still waiting for an answer to this question."))],
        )
    )


def note_card(outcome: Outcome) -> Card:
    """The thread's note of what became of a question it did not answer."""
    parts = [run(text, weight="Bolder" if bold else None) for text, bold in outcome.headline()]
    return card_json(AdaptiveCard(version=CARD_VERSION, body=[line(*parts)]))
