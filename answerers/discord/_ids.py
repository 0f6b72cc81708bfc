"""How our components are named, so an interaction tells which request, question and
option it is about without any state of the replica that posted the message.

A `custom_id` (1-100 characters, unique within a message) is
`aq1|<verb>|<group tag>|<request id>[|<question>[|<option>]]`: the verb says what the
component does, the group tag (8 hex digits of the group name's SHA-256; the name
itself may be 64 characters) which askq group posted it, the request id at most 64.
The longest is 3 + 2 + 9 + 65 + 2 + 2 = 83 characters.

Verbs: `p` a button answering with its option; `s` a select (values: option indices),
answering at once (one question) or kept as the clicker's draft (several); `go` submit
the draft; `m` open the modal of custom answers; `mm` the modal's submission (inputs
`c<question>`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, Literal

MARK = "aq1"
Verb = Literal["p", "s", "go", "m", "mm"]
PICK: Final[Literal["p"]] = "p"
SELECT: Final[Literal["s"]] = "s"
SUBMIT: Final[Literal["go"]] = "go"
MODAL: Final[Literal["m"]] = "m"
MODAL_SUBMIT: Final[Literal["mm"]] = "mm"
VERBS = (PICK, SELECT, SUBMIT, MODAL, MODAL_SUBMIT)
MAX_CUSTOM_ID = 100


class MalformedId(ValueError):
    """A custom_id with our mark that is not what our messages carry."""


def group_tag(group: str) -> str:
    return hashlib.sha256(group.encode()).hexdigest()[:8]


def custom_id(verb: Verb, group: str, request_id: str, *indices: int) -> str:
    made = "|".join([MARK, verb, group_tag(group), request_id, *map(str, indices)])
    assert len(made) <= MAX_CUSTOM_ID, made
    return made


def custom_input(question: int) -> str:
    return f"c{question}"


@dataclass(frozen=True)
class Action:
    verb: Verb
    tag: str  # the posting group's tag
    request_id: str
    question: int | None = None
    option: int | None = None


def _index(value: str, name: str) -> int:
    if not value.isdigit() or len(value) > 2:
        raise MalformedId(f"{name} is not an index")
    return int(value)


def parse(value: object) -> Action | None:
    """Our action, or None when it is not ours (another app's component)."""
    if not isinstance(value, str) or not value.startswith(MARK + "|"):
        return None
    parts = value.split("|")
    if len(parts) < 4 or len(parts) > 6 or parts[1] not in VERBS:
        raise MalformedId("not one of askq's components")
    verb: Verb = parts[1]
    tag, request_id = parts[2], parts[3]
    if not request_id:
        raise MalformedId("no request")
    question = _index(parts[4], "question") if len(parts) > 4 else None
    option = _index(parts[5], "option") if len(parts) > 5 else None
    if verb == PICK and option is None:
        raise MalformedId("a button without its option")
    if verb == SELECT and question is None:
        raise MalformedId("a select without its question")
    return Action(verb, tag, request_id, question, option)
