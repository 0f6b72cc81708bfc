"""The answer form: its fields, and a submitted form turned into answers, each
question checked as the seam checks it (`askq.parse_answers`). The messages beside the
fields are written here, for the person filling the form in ("Choose one of the
options, or write your own answer"): the seam's own name the question by its id and
its fields, which the page never shows.

Fields, for question i: `q<i>` holds `opt<k>` for the k-th option (radio buttons for a
single-select question, checkboxes for a multi-select one) or `other` for "Other…";
`q<i>-custom` holds the Other (or free) text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from askq import MAX_CUSTOM, Answers, AskError, Question, parse_answers

OTHER = "other"

# What the form says when the seam refuses what the form's own checks let through
# (only a form altered by hand gets here: the page offers nothing else).
NOT_ACCEPTED = "This answer cannot be accepted: choose again from the options shown."


@dataclass
class FormState:
    """What the form shows: the choices made (by option index, and Other) and the text,
    per question, and the messages beside each question (and for the whole form)."""

    chosen: dict[int, set[str]] = field(default_factory=dict)  # question -> {"opt1", "other"}
    custom: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    error: str | None = None

    def is_chosen(self, question: int, value: str) -> bool:
        return value in self.chosen.get(question, set())


def preselected(
    questions: Sequence[Question], question_id: str | None, option: str | None
) -> FormState:
    """A link's pre-selection: `option` of the question `question_id` (or of the only
    question) chosen."""
    state = FormState()
    for qi, q in enumerate(questions):
        if (question_id is None and len(questions) == 1) or q.id == question_id:
            if option is not None and option in q.labels:
                state.chosen[qi] = {f"opt{q.labels.index(option)}"}
    return state


def _label(question: Question, value: str) -> str:
    if value.startswith("opt") and value[3:].isdigit():
        index = int(value[3:])
        if index < len(question.options):
            return question.options[index].label
    return value  # not one of ours: the seam's check names it


def read_form(questions: Sequence[Question], form: Any) -> tuple[FormState, Answers | None]:
    """The form as submitted, and its answers if every question's are valid."""
    state = FormState()
    raw: list[dict[str, Any]] = []
    for qi, q in enumerate(questions):
        values = [str(v) for v in form.getlist(f"q{qi}")][: len(q.options) + 1]
        text = str(form.get(f"q{qi}-custom") or "")
        state.chosen[qi] = set(values)
        state.custom[qi] = text
        selected = [_label(q, v) for v in values if v != OTHER]
        answer: dict[str, Any] = {"id": q.id, "selected": selected}
        # The text counts where it is the answer: a free-text question, "Other…" chosen,
        # or a single-select question with nothing chosen.
        if not q.options or OTHER in values or (not q.multi_select and not selected):
            if text.strip():
                answer["custom"] = text
        problem = _problem(q, values, text)
        if problem is None:
            try:
                parse_answers([q], [answer])
            except AskError:
                problem = NOT_ACCEPTED
        if problem is not None:
            state.errors[qi] = problem
        raw.append(answer)
    if state.errors:
        return state, None
    try:
        return state, parse_answers(list(questions), raw)
    except AskError:  # every question passed alone; kept for safety
        state.error = NOT_ACCEPTED
        return state, None


def _problem(question: Question, values: list[str], text: str) -> str | None:
    """What is wrong with one question's fields, in the form's own words; None when
    nothing the form can see."""
    written = text.strip()
    if len(text) > MAX_CUSTOM:
        return f"Your answer is too long: at most {MAX_CUSTOM:,} characters."
    if not question.options:
        return None if written else "Write your answer in the box."
    chosen = [v for v in values if v != OTHER]
    if OTHER in values and not written:
        return "You chose Other…: write your answer in its box, or choose an option."
    if not question.multi_select:
        if len(chosen) > 1:
            return "Choose only one option."
        if not chosen and not written:
            return "Choose one of the options, or choose Other… and write your own answer."
    return None
