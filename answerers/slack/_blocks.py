"""Block Kit rendering: the question message, its final state, the "Other…" modal.

Agent text in mrkdwn (sections, context, the top-level `text` of the message) is
escaped (`_mrkdwn`), so it cannot `<!channel>`, mention anyone or hide a link. A
question or option list longer than a section is shown whole, in several (`_sections`);
every other text is cut to Slack's limit for its place (a longer one makes Slack refuse
the whole message with `invalid_blocks`), never inside an escape.

One question, single-select: a button per option, a click answers. Anything else (a
multi-select, several questions): checkboxes / radio buttons and one Submit, so the
request is answered as one. "Other…" (or "Answer…" on a free-text question) opens a
modal with a text input for `custom`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from askq import RECOMMENDED_SUFFIX, Answer, Caller, Question, answered_by

from . import _ids as ids
from ._mrkdwn import cut_escaped, escape, mrkdwn
from ._sections import Block, LongText, layout, section

HEADER_MAX = 150
BUTTON_MAX = 75
OPTION_TEXT_MAX = 75
OPTION_DESCRIPTION_MAX = 75
CONTEXT_MAX = 3000
MODAL_TITLE_MAX = 24
MODAL_BUTTON_MAX = 24
INPUT_MAX = 3000  # plain_text_input max_length; askq allows 4,000, Slack 3,000
FALLBACK_MAX = 300  # the notification text; Slack allows more, a notification shows less
MODAL_MAX_BLOCKS = 100
BY_MAX = 500  # another channel's attribution, as the final message repeats it

# What a message too long for 50 blocks cuts first (the higher rank; `_sections`): in
# the question, the option list (the controls show each option too) before the
# question; in the final message, the question before the answer it is now about.
ANSWER_RANK, QUESTION_RANK, OPTION_LIST_RANK = 0, 1, 2


def cut(text: str, limit: int) -> str:
    """Plain text (not escaped: plain_text is shown as is) in at most `limit`
    characters; a cut text ends with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": cut(text, limit), "emoji": True}


def answers_at_once(questions: list[Question]) -> bool:
    """One click answers: one single-select question with options."""
    return len(questions) == 1 and bool(questions[0].options) and not questions[0].multi_select


def modal_answers(questions: list[Question]) -> bool:
    """The "Other…" modal submits the answer itself (one question), or only notes the
    text until Submit (several)."""
    return len(questions) == 1


def _option(question: Question, index: int, with_description: bool) -> dict[str, Any]:
    option = question.options[index]
    out: dict[str, Any] = {
        "text": plain(option.label, OPTION_TEXT_MAX),
        "value": str(index),
    }
    if with_description and option.description:
        out["description"] = plain(option.description, OPTION_DESCRIPTION_MAX)
    return out


def _option_list(question: Question) -> LongText:
    """Every option in full, a line each (so a long list splits between options)."""
    lines = []
    for option in question.options:
        line = f"• *{escape(option.label)}*"
        if option.description:
            line += f" — {escape(option.description)}"
        lines.append(line)
    return LongText("\n".join(lines), OPTION_LIST_RANK)


def _other_button(question: Question) -> Block:
    return {
        "type": "button",
        "action_id": ids.OTHER,
        "text": plain("Other…" if question.options else "Answer…", BUTTON_MAX),
        "value": "other",
    }


def _controls(
    request_id: str, group: str, index: int, question: Question, at_once: bool
) -> list[Block | LongText]:
    """The blocks that let a human answer one question."""
    block_id = ids.question_block(request_id, index, group)
    if not question.options:
        return [{"type": "actions", "block_id": block_id, "elements": [_other_button(question)]}]
    blocks: list[Block | LongText] = []
    cut_somewhere = any(
        len(o.label) > OPTION_TEXT_MAX or len(o.description) > OPTION_DESCRIPTION_MAX
        for o in question.options
    )
    if at_once:
        # Buttons carry no description: list them above when there is something to read.
        if cut_somewhere or any(o.description for o in question.options):
            blocks.append(_option_list(question))
        elements: list[Block] = []
        for i, option in enumerate(question.options):
            button: Block = {
                "type": "button",
                "action_id": f"{ids.PICK}{i}",
                "text": plain(option.label, BUTTON_MAX),
                "value": str(i),
            }
            if i == 0 and option.label.endswith(RECOMMENDED_SUFFIX):
                button["style"] = "primary"
            elements.append(button)
    else:
        if cut_somewhere:  # the full texts, since the checkboxes show them cut
            blocks.append(_option_list(question))
        chooser = {
            "type": "checkboxes" if question.multi_select else "radio_buttons",
            "action_id": ids.CHECK if question.multi_select else ids.RADIO,
            "options": [
                _option(question, i, with_description=not cut_somewhere)
                for i in range(len(question.options))
            ],
        }
        elements = [chooser]
    elements.append(_other_button(question))
    blocks.append({"type": "actions", "block_id": block_id, "elements": elements})
    return blocks


def _question_text(question: Question) -> LongText:
    return LongText(escape(question.question), QUESTION_RANK)


def _intro(question: Question, index: int, total: int) -> list[Block | LongText]:
    count = f" ({index + 1}/{total})" if total > 1 else ""
    return [
        {"type": "header", "text": plain(question.header + count, HEADER_MAX)},
        _question_text(question),
    ]


def _asked_by(caller: Caller) -> Block:
    # Ids run to 200 characters, 1,000 escaped: both fit a context whole.
    text = f"Agent `{escape(caller.agent_id)}` asks · turn `{escape(caller.turn_id)}`"
    return {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": cut_escaped(text, CONTEXT_MAX)}],
    }


def fallback_text(questions: list[Question]) -> str:
    """The message's top-level `text`: the notification, what a screen reader says."""
    first = questions[0]
    more = f" (+{len(questions) - 1} more)" if len(questions) > 1 else ""
    text = f"{escape(first.header)}: {escape(first.question)}"
    return cut_escaped(text, FALLBACK_MAX - len(more)) + more


def _open_in_browser(request_id: str, url: str) -> Block:
    # A link button: Slack opens the URL and still reports the click, which the block
    # id (not `askq:`) marks as not an answer.
    return {
        "type": "actions",
        "block_id": f"{ids.OPEN_BLOCK}{request_id}",
        "elements": [
            {
                "type": "button",
                "action_id": ids.OPEN_ACTION,
                "text": plain("Open in browser", BUTTON_MAX),
                "url": url,
            }
        ],
    }


def question_message(
    request_id: str,
    questions: list[Question],
    caller: Caller,
    open_url: str | None = None,
    *,
    group: str,
) -> list[Block]:
    """The message that asks, for `group` (its clicks name it): every question, and one
    Submit unless a click answers; with `open_url`, an "Open in browser" button to the
    web inbox."""
    at_once = answers_at_once(questions)
    blocks: list[Block | LongText] = []
    for index, question in enumerate(questions):
        if index:
            blocks.append({"type": "divider"})
        blocks += _intro(question, index, len(questions))
        blocks += _controls(request_id, group, index, question, at_once)
    if not at_once and not (len(questions) == 1 and not questions[0].options):
        blocks.append(
            {
                "type": "actions",
                "block_id": ids.submit_block(request_id, group),
                "elements": [
                    {
                        "type": "button",
                        "action_id": ids.SUBMIT_ACTION,
                        "text": plain("Submit", BUTTON_MAX),
                        "style": "primary",
                        "value": "submit",
                    }
                ],
            }
        )
    if open_url is not None:
        blocks.append(_open_in_browser(request_id, open_url))
    blocks.append(_asked_by(caller))
    return layout(blocks)


@dataclass(frozen=True)
class Outcome:
    """What became of a request, as the final message shows it."""

    state: str  # ANSWERED | CANCELLED | FAILED | OFFERED (escalated)
    code: str | None = None
    by: str | None = None
    user: str | None = None  # the Slack user who answered on this message
    answers: tuple[Answer, ...] = ()
    why: str | None = None  # a cancellation: what happened (askq's words)

    def headline(self) -> str:
        if self.state == "ANSWERED":
            if self.user:  # askq's own mention of who answered here
                return f"✅ *Answered* by <@{escape(self.user)}>"
            if not self.by:
                return "✅ *Answered elsewhere*"
            how = answered_by(self.by).removeprefix("answered")  # " in the web inbox by carol"
            return f"✅ *Answered*{mrkdwn(how, BY_MAX)}"
        if self.state == "CANCELLED":
            why = f" ({mrkdwn(self.why, BY_MAX)})" if self.why else ""
            return f"🚫 *Cancelled*{why}"
        if self.state == "FAILED":
            return "⌛ *No longer pending*"
        return "⤴️ *Escalated* to another answerer"

    def to_json(self) -> str:
        data = {
            "state": self.state,
            "code": self.code,
            "by": self.by,
            "user": self.user,
            "answers": [a.model_dump(exclude_none=True) for a in self.answers],
            "why": self.why,
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        data = json.loads(text)
        return cls(
            state=data["state"],
            code=data.get("code"),
            by=data.get("by"),
            user=data.get("user"),
            answers=tuple(Answer.model_validate(a) for a in data.get("answers") or ()),
            why=data.get("why"),
        )


def _answer_text(answer: Answer) -> LongText:
    parts = [f"*{escape(label)}*" for label in answer.selected]
    if answer.custom is not None:
        parts.append(f"“{escape(answer.custom)}”")
    return LongText("→ " + (", ".join(parts) or "(nothing selected)"), ANSWER_RANK)


def final_message(questions: list[Question], outcome: Outcome, caller: Caller) -> list[Block]:
    """The message once settled: the questions, what became of them, no controls."""
    answers = {a.id: a for a in outcome.answers}
    blocks: list[Block | LongText] = [section(outcome.headline())]
    for index, question in enumerate(questions):
        blocks += _intro(question, index, len(questions))
        if question.id in answers:
            blocks.append(_answer_text(answers[question.id]))
    blocks.append(_asked_by(caller))
    return layout(blocks)


def final_text(questions: list[Question], outcome: Outcome) -> str:
    """The updated message's top-level `text`; its headline comes first, so a cut never
    reaches askq's own `<@user>`."""
    return cut_escaped(f"{outcome.headline()} — {fallback_text(questions)}", FALLBACK_MAX)


def custom_modal(
    question: Question,
    metadata: dict[str, Any],
    *,
    submits_answer: bool,
    initial: str | None = None,
) -> dict[str, Any]:
    """The "Other…" modal: the question and a text input for `custom`. `metadata`
    (request, question, message) comes back with the submission."""
    element: dict[str, Any] = {
        "type": "plain_text_input",
        "action_id": ids.CUSTOM_ACTION,
        "multiline": True,
        "max_length": INPUT_MAX,
    }
    if initial:
        element["initial_value"] = cut(initial, INPUT_MAX)
    return {
        "type": "modal",
        "callback_id": ids.MODAL_CALLBACK,
        "private_metadata": json.dumps(metadata, separators=(",", ":")),
        "title": plain(question.header, MODAL_TITLE_MAX),
        "submit": plain("Answer" if submits_answer else "Save", MODAL_BUTTON_MAX),
        "close": plain("Cancel", MODAL_BUTTON_MAX),
        "blocks": layout(
            [
                _question_text(question),
                {
                    "type": "input",
                    "block_id": ids.CUSTOM_BLOCK,
                    "label": plain("Your answer", 2000),
                    "element": element,
                    # Saving a note (not yet the answer): an empty text takes the note back.
                    **({} if submits_answer else {"optional": True}),
                },
            ],
            MODAL_MAX_BLOCKS,
        ),
    }
