"""The Discord messages of a question: the message that asks, its final state, the
modal of custom answers, and the notes in its thread.

Layouts, by what the request holds (components: at most 5 action rows, 5 buttons a row,
a select alone in its row with at most 25 options):

- one single-select question with options: a button per option (a click answers),
  and "Answer in my own words" (the modal);
- one multi-select question: a string select (closing it answers), and the modal button;
- one question without options: the modal button;
- several questions: a select per question with options (a choice is kept as the
  clicker's draft), then Submit and the modal button (its answers go with the draft).

So a request fits when at most 4 of its questions have options and it has at most 5
questions (a modal holds 5 text inputs): `fits`. The channel declines the others, so
the waterfall moves on to a channel that can show them.

Content is Discord Markdown built by askq around agent text escaped by `_text`; at
most 2,000 characters: a message over it is built again with shorter texts
(descriptions first, then questions, then labels), each cut one ending in an ellipsis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from askq import MAX_CUSTOM, RECOMMENDED_SUFFIX, Answer, AskRequest, Question, answered_by

from .. import _chat as chat
from . import _ids as ids
from ._text import NO_MENTIONS, cut, plain, shown

CONTENT_MAX = 2000
ROWS_MAX = 5
BUTTONS_PER_ROW = 5
SELECT_OPTIONS_MAX = 25
LABEL_MAX = 80  # a button's label
OPTION_TEXT_MAX = 100  # a select option's label and description
PLACEHOLDER_MAX = 150
MODAL_TITLE_MAX = 45
INPUT_LABEL_MAX = 45
INPUT_VALUE_MAX = 4000
MODAL_INPUTS_MAX = 5
BY_MAX = 300
NOTICE_MAX = 1800

# Component types and styles (Discord's numbers).
ACTION_ROW, BUTTON, STRING_SELECT, TEXT_INPUT = 1, 2, 3, 4
PRIMARY, SECONDARY, SUCCESS = 1, 2, 3
PARAGRAPH = 2
EPHEMERAL = 1 << 6

Message = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """How much of each agent text a message shows (characters before escaping)."""

    question: int = 1000
    description: int = 200
    label: int = 80
    answer: int = 400
    header: int = 40
    picks: int = 10  # labels an answer lists (the rest as "and N more")


LEVELS = (
    Limits(),
    Limits(question=600, description=80, answer=200),
    Limits(question=300, description=0, label=60, answer=100),
    Limits(question=150, description=0, label=40, answer=60),
    Limits(question=60, description=0, label=25, answer=30),
    Limits(question=30, description=0, label=12, answer=15, header=20, picks=3),
)


def fits(questions: list[Question]) -> bool:
    """Whether Discord's components can carry the questions (see the module's text)."""
    with_options = sum(1 for q in questions if q.options)
    return len(questions) <= MODAL_INPUTS_MAX and with_options <= ROWS_MAX - 1


def why_not(questions: list[Question]) -> str:
    with_options = sum(1 for q in questions if q.options)
    return (
        f"{len(questions)} questions ({with_options} with options), more than one Discord"
        " message can ask (at most 5, at most 4 with options)"
    )


def at_once(questions: list[Question]) -> bool:
    """One question: a click (or a select) answers it."""
    return len(questions) == 1


# --- what became of a request ------------------------------------------------------


class Outcome(chat.Outcome):
    """What became of a request, as the final message shows it (Slack's and Teams'
    words); `name`: the Discord user who answered on this message."""

    def headline(self) -> str:
        """Markdown: askq's emphasis around escaped words of people and channels."""
        if self.state == "ANSWERED":
            if self.name:
                return f"✅ **Answered** by {shown(self.name, BY_MAX)}"
            if not self.by:
                return "✅ **Answered elsewhere**"
            how = answered_by(self.by).removeprefix("answered")  # " in Slack by al"
            return f"✅ **Answered**{shown(how, BY_MAX)}"
        if self.state == "CANCELLED":
            why = f" \\({shown(self.why, BY_MAX)}\\)" if self.why else ""
            return f"🚫 **Cancelled**{why}"
        if self.state == "FAILED":
            return "⌛ **No longer pending**"
        return "⤴️ **Escalated** to another answerer"


def discord_by(user_id: str, name: str | None) -> str:
    """How an answer given here is attributed: the user id, stable; the name, readable."""
    return f"discord:{user_id}" + (f" ({name})" if name else "")


# --- content -----------------------------------------------------------------------------


def _intro(question: Question, index: int, total: int, limits: Limits) -> list[str]:
    count = f" ({index + 1}/{total})" if total > 1 else ""
    header = shown(question.header, limits.header)
    return [f"**{header}**{count}", shown(question.question, limits.question)]


def _option_lines(question: Question, limits: Limits) -> list[str]:
    """Every option with its description (buttons and selects show the label only)."""
    if not limits.description or not any(o.description for o in question.options):
        return []
    lines = []
    for option in question.options:
        line = f"• **{shown(option.label, limits.label)}**"
        if option.description:
            line += " — " + shown(option.description, limits.description)
        lines.append(line)
    return lines


def _asked_by(request: AskRequest) -> str:
    caller = request.caller
    return f"-# Agent {shown(caller.agent_id, 80)} asks · turn {shown(caller.turn_id, 80)}"


def _answer_line(answer: Answer, limits: Limits) -> str:
    parts = [f"**{shown(label, limits.label)}**" for label in answer.selected[: limits.picks]]
    if len(answer.selected) > limits.picks:
        parts.append(f"and {len(answer.selected) - limits.picks} more")
    if answer.custom is not None:
        parts.append(f"“*{shown(answer.custom, limits.answer)}*”")
    return "→ " + (", ".join(parts) if parts else "*\\(nothing selected\\)*")


def length(content: str) -> int:
    """Characters as Discord counts them (UTF-16 units: an emoji beyond the BMP is 2)."""
    return len(content.encode("utf-16-le")) // 2


def _fit(build: Callable[[Limits], str]) -> str:
    content = ""
    for limits in LEVELS:
        content = build(limits)
        if length(content) <= CONTENT_MAX:
            return content
    # Not reached with askq's limits (tests/test_discord_messages.py); cut as a last resort.
    while length(content) > CONTENT_MAX:
        content = cut(content, len(content) - (length(content) - CONTENT_MAX))
    return content


# --- components --------------------------------------------------------------------------


def _row(*components: dict[str, Any]) -> dict[str, Any]:
    return {"type": ACTION_ROW, "components": list(components)}


def _button(label: str, cid: str, style: int = SECONDARY) -> dict[str, Any]:
    return {"type": BUTTON, "style": style, "label": plain(label, LABEL_MAX), "custom_id": cid}


def _select(request: AskRequest, group: str, index: int, *, draft: bool) -> dict[str, Any]:
    question = request.questions[index]
    options = [
        {
            "label": plain(option.label, OPTION_TEXT_MAX),
            "value": str(i),
            **(
                {"description": plain(option.description, OPTION_TEXT_MAX)}
                if option.description
                else {}
            ),
        }
        for i, option in enumerate(question.options[:SELECT_OPTIONS_MAX])
    ]
    many = len(options) if question.multi_select else 1
    return {
        "type": STRING_SELECT,
        "custom_id": ids.custom_id(ids.SELECT, group, request.id, index),
        "placeholder": plain(
            f"{question.header}: choose " + ("any" if question.multi_select else "one"),
            PLACEHOLDER_MAX,
        ),
        "options": options,
        "min_values": 0 if draft else 1,
        "max_values": many,
    }


def components(request: AskRequest, group: str) -> list[dict[str, Any]]:
    questions = request.questions
    own_words = _button(
        "Answer in my own words" if any(q.options for q in questions) else "Answer",
        ids.custom_id(ids.MODAL, group, request.id),
        SECONDARY if any(q.options for q in questions) else PRIMARY,
    )
    rows: list[dict[str, Any]] = []
    if at_once(questions):
        question = questions[0]
        if question.options and not question.multi_select:
            buttons = [
                _button(
                    option.label,
                    ids.custom_id(ids.PICK, group, request.id, 0, i),
                    SUCCESS if i == 0 and option.label.endswith(RECOMMENDED_SUFFIX) else PRIMARY,
                )
                for i, option in enumerate(question.options)
            ]
            for start in range(0, len(buttons), BUTTONS_PER_ROW):
                rows.append(_row(*buttons[start : start + BUTTONS_PER_ROW]))
        elif question.options:
            rows.append(_row(_select(request, group, 0, draft=False)))
        rows.append(_row(own_words))
        return rows
    for index, question in enumerate(questions):
        if question.options:
            rows.append(_row(_select(request, group, index, draft=True)))
    submit = _button("Submit", ids.custom_id(ids.SUBMIT, group, request.id), SUCCESS)
    rows.append(_row(submit, own_words))
    return rows


# --- the messages --------------------------------------------------------------------------


def question_message(request: AskRequest, group: str) -> Message:
    """The message that asks, for `group` (its components name it)."""
    questions = request.questions

    def build(limits: Limits) -> str:
        lines: list[str] = []
        for index, question in enumerate(questions):
            if index:
                lines.append("")
            lines += _intro(question, index, len(questions), limits)
            lines += _option_lines(question, limits)
        if len(questions) > 1:
            lines += ["", "-# Choose in the menus below, then Submit."]
        lines.append(_asked_by(request))
        return "\n".join(lines)

    return {
        "content": _fit(build),
        "components": components(request, group),
        "allowed_mentions": NO_MENTIONS,
    }


def final_message(request: AskRequest, outcome: Outcome) -> Message:
    """The message once settled: what became of it, the questions, no components."""
    answers = {a.id: a for a in outcome.answers}
    questions = request.questions

    def build(limits: Limits) -> str:
        lines = [outcome.headline()]
        for index, question in enumerate(questions):
            lines += _intro(question, index, len(questions), limits)
            if question.id in answers:
                lines.append(_answer_line(answers[question.id], limits))
        lines.append(_asked_by(request))
        return "\n".join(lines)

    return {"content": _fit(build), "components": [], "allowed_mentions": NO_MENTIONS}


def modal(request: AskRequest, group: str) -> dict[str, Any]:
    """The modal of custom answers: a text input per question (`fits`: at most 5)."""
    questions = request.questions
    rows = []
    for index, question in enumerate(questions[:MODAL_INPUTS_MAX]):
        needed = not question.options and len(questions) == 1
        rows.append(
            _row(
                {
                    "type": TEXT_INPUT,
                    "custom_id": ids.custom_input(index),
                    "style": PARAGRAPH,
                    "label": plain(question.header, INPUT_LABEL_MAX),
                    "placeholder": plain(question.question, 100),
                    "required": needed,
                    "max_length": min(MAX_CUSTOM, INPUT_VALUE_MAX),
                }
            )
        )
    title = questions[0].header if len(questions) == 1 else "Your answers"
    return {
        "custom_id": ids.custom_id(ids.MODAL_SUBMIT, group, request.id),
        "title": plain(title, MODAL_TITLE_MAX),
        "components": rows,
    }


def ephemeral(text: str) -> Message:
    """A word to the clicker alone (askq's own text; quoted agent text escaped by the
    caller)."""
    return {"content": cut(text, NOTICE_MAX), "flags": EPHEMERAL, "allowed_mentions": NO_MENTIONS}


def reminder_message(message_id: str) -> Message:
    return _reply("⏰ Still waiting for an answer to this question.", message_id)


def note_message(outcome: Outcome, message_id: str) -> Message:
    """The thread's note of what became of a question it did not answer."""
    return _reply(outcome.headline(), message_id)


def _reply(content: str, message_id: str) -> Message:
    return {
        "content": content,
        "message_reference": {"message_id": message_id, "fail_if_not_exists": False},
        "allowed_mentions": {"parse": [], "replied_user": False},
    }
