"""How our actions and inputs are named, so a click tells which request, question and
option it is about without any state of the replica that posted the card.

Every `Action.Execute` carries `data` `{"askq": 1, "r": <request id>, "g": <group>}`
(and `"q"`, `"o"`: the question and option of a button); its `verb` says what it does:
`askq.pick` (a button answering at once), `askq.submit` (send the inputs),
`askq.refresh` (Teams asking for the card as it is now). Inputs are `q<i>` (a
question's choices: option indices, comma-separated) and `c<i>` (its custom answer);
Teams merges their values into the action's `data`. A click naming another group is
refused: each askq Teams group needs a bot of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

PICK = "askq.pick"
SUBMIT = "askq.submit"
REFRESH = "askq.refresh"
VERBS = (PICK, SUBMIT, REFRESH)
MARK, REQUEST, GROUP, QUESTION, OPTION = "askq", "r", "g", "q", "o"
MAX_QUESTIONS = 8  # askq's own limit: input ids beyond it are not ours

Verb = Literal["askq.pick", "askq.submit", "askq.refresh"]


class MalformedAction(ValueError):
    """An action with our mark that is not what our cards send."""


def action_data(request_id: str, group: str) -> dict[str, Any]:
    return {MARK: 1, REQUEST: request_id, GROUP: group}


def choice_input(question: int) -> str:
    return f"q{question}"


def custom_input(question: int) -> str:
    return f"c{question}"


@dataclass(frozen=True)
class Action:
    verb: Verb
    request_id: str
    group: str
    question: int | None = None  # a button's
    option: int | None = None
    choices: dict[int, tuple[int, ...]] = field(default_factory=dict)  # q<i>: chosen options
    custom: dict[int, str] = field(default_factory=dict)  # c<i>: text typed
    values: dict[str, str] = field(default_factory=dict)  # every input as sent, to show again


def _index(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise MalformedAction(f"{name} is not an index")
    try:
        index = int(value)
    except ValueError:
        raise MalformedAction(f"{name} is not an index") from None
    if not 0 <= index < 100:
        raise MalformedAction(f"{name} is out of range")
    return index


def parse_action(verb: Any, data: Any) -> Action | None:
    """Our action, or None when it is not ours (another app's card, no mark)."""
    if not isinstance(data, dict) or data.get(MARK) != 1:
        return None
    if verb not in VERBS:
        raise MalformedAction(f"unknown verb {verb!r}")
    request_id, group = data.get(REQUEST), data.get(GROUP)
    if not isinstance(request_id, str) or not request_id or not isinstance(group, str):
        raise MalformedAction("no request or group")
    question = option = None
    if verb == PICK:
        question = _index(data.get(QUESTION), "q")
        option = _index(data.get(OPTION), "o")
    choices: dict[int, tuple[int, ...]] = {}
    custom: dict[int, str] = {}
    values: dict[str, str] = {}
    for name, value in data.items():
        if len(name) < 2 or name[0] not in "qc" or not name[1:].isdigit():
            continue
        index = int(name[1:])
        if index >= MAX_QUESTIONS or not isinstance(value, str):
            continue
        values[name] = value
        if name[0] == "q":
            picked = [part.strip() for part in value.split(",") if part.strip()]
            choices[index] = tuple(_index(part, name) for part in picked)
        else:
            custom[index] = value
    return Action(verb, request_id, group, question, option, choices, custom, values)
