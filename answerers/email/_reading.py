"""A reply's text (quoted history and signature already stripped) -> answers.

One question:
- `1`, `2`: that option; `1, 3` (or `1 3`, `1 and 3`): those options, for a multiple
  choice; `2. Go` (a number and its option's name) is option 2;
- an option's name, case-insensitive, with or without " (Recommended)";
- anything else: the person's own words (`custom`): "Other" on a question with
  options, the answer of a free-text question.
  Only the first line is read for a choice; own words are the whole text.
Several questions: a line per question, `<number>: <answer>` (or the question's id or
header before the colon), each answer read as above; `1: 2` and `2: yes`.

What cannot be read is `Unreadable` with a reason the person is told ("there is no
option 4; choose 1 to 3"), so they can reply again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from askq import MAX_CUSTOM, RECOMMENDED_SUFFIX, Question, quoted

from ._compose import option_numbers

_NUMBERS = re.compile(r"^\d+(?:\s*(?:,|;|\s|\band\b|&)\s*\d+)*$", re.IGNORECASE)
_NUMBERED_LABEL = re.compile(r"^(\d+)\s*[.)\-:]\s*(.+)$")
_KEYED_LINE = re.compile(r"^\s*(?:q(?:uestion)?\s*)?([^:=]{1,64}?)\s*[:=]\s*(.*)$", re.IGNORECASE)
_TRAILING = ".!;, \t"
_QUOTES = "\"'“”‘’«»`*_"


class Unreadable(Exception):  # noqa: N818 - the person's reply, not our failure
    """The reply says something we cannot turn into answers; `reason` says what."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _norm(text: str) -> str:
    return " ".join(text.strip(_QUOTES + " \t").rstrip(_TRAILING).split()).casefold()


def _label_index(question: Question, text: str) -> int | None:
    wanted = _norm(text)
    if not wanted:
        return None
    for index, label in enumerate(question.labels):
        bare = label[: -len(RECOMMENDED_SUFFIX)] if label.endswith(RECOMMENDED_SUFFIX) else label
        if wanted in (_norm(label), _norm(bare)):
            return index
    return None


def _choices(question: Question, line: str, where: str) -> list[int] | None:
    """Option indices the line names, None when it names none (own words)."""
    text = line.strip().strip(_QUOTES).rstrip(_TRAILING).strip()
    if _NUMBERS.match(text):
        numbers = [int(n) for n in re.findall(r"\d+", text)]
        for n in numbers:
            if not 1 <= n <= len(question.options):
                raise Unreadable(
                    f"{where}there is no option {n}; choose {option_numbers(question)}"
                )
        picked = list(dict.fromkeys(n - 1 for n in numbers))
        if len(picked) > 1 and not question.multi_select:
            numbers_text = [str(i + 1) for i in picked]
            named = ", ".join(numbers_text[:-1]) + " and " + numbers_text[-1]
            raise Unreadable(
                f"{where}this question takes one option only, and your reply chose {named}"
            )
        return picked
    index = _label_index(question, text)
    if index is not None:
        return [index]
    numbered = _NUMBERED_LABEL.match(text)
    if numbered:
        n = int(numbered.group(1))
        if 1 <= n <= len(question.options) and _label_index(question, numbered.group(2)) == n - 1:
            return [n - 1]
    return None


def _answer(question: Question, lines: Sequence[str], where: str) -> dict[str, Any]:
    picked = _choices(question, lines[0], where) if question.options else None
    if picked is not None:
        return {"id": question.id, "selected": [question.options[i].label for i in picked]}
    custom = "\n".join(lines).strip()
    if len(custom) > MAX_CUSTOM:
        raise Unreadable(f"{where}your answer is longer than {MAX_CUSTOM:,} characters")
    return {"id": question.id, "selected": [], "custom": custom}


def _question_of(questions: Sequence[Question], key: str) -> int | None:
    key = key.strip()
    if key.isdigit():
        n = int(key)
        return n - 1 if 1 <= n <= len(questions) else None
    folded = key.casefold()
    for index, question in enumerate(questions):
        if folded in (question.id.casefold(), question.header.strip().casefold()):
            return index
    return None


def read_answers(questions: Sequence[Question], text: str) -> list[dict[str, Any]]:
    """The answers a reply gives, one per question, in question order."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise Unreadable("the reply has no answer in it")
    if len(questions) == 1:
        keyed = _KEYED_LINE.match(lines[0])
        if keyed and keyed.group(2).strip() and _question_of(questions, keyed.group(1)) == 0:
            lines = [keyed.group(2).strip(), *lines[1:]]  # "1: 2" to a single question
        return [_answer(questions[0], lines, "")]
    found: dict[int, dict[str, Any]] = {}
    for line in lines:
        keyed = _KEYED_LINE.match(line)
        if keyed is None:
            continue
        index = _question_of(questions, keyed.group(1))
        if index is None or not keyed.group(2).strip():
            continue
        where = f"question {index + 1} ({quoted(questions[index].header, 40)}): "
        if index in found:
            raise Unreadable(f"{where}answered twice")
        found[index] = _answer(questions[index], [keyed.group(2)], where)
    missing = [
        f"{i + 1} ({quoted(q.header, 40)})" for i, q in enumerate(questions) if i not in found
    ]
    if missing:
        raise Unreadable(
            f"no answer for question{'s' if len(missing) > 1 else ''} {', '.join(missing)};"
            " write one line per question, e.g. 1: 2"
        )
    return [found[i] for i in range(len(questions))]
