"""How our interactive elements are named, so a click tells which request, question and
option it is about without any state of the replica that posted the message.

- a question's controls sit in a block `askq:<question index>:<request id>:<group>`,
  the submit button in `askq:submit:<request id>:<group>` (block ids are unique per
  message, 255 characters at most; request ids are 32 hex digits, group names 64
  characters at most): a click names the group whose message it is, so a group never
  takes another's click (of one Slack app) for its own. Messages posted before the
  group was named (`askq:<part>:<request id>`) are taken as the receiving group's;
- actions: `askq.pick.<option index>` (a button answering at once), `askq.check`
  (checkboxes), `askq.radio` (radio buttons), `askq.other` ("Other…" / "Answer…"),
  `askq.submit`; checkbox and radio option values are option indices.

Indices, not labels: labels run to 120 characters and may hold anything, ids and
values have limits of their own.
"""

from __future__ import annotations

BLOCK_PREFIX = "askq:"
SUBMIT = "submit"
PICK = "askq.pick."
CHECK = "askq.check"
RADIO = "askq.radio"
OTHER = "askq.other"
SUBMIT_ACTION = "askq.submit"
MODAL_CALLBACK = "askq:custom"
CUSTOM_BLOCK = "askq:custom"
CUSTOM_ACTION = "custom"
# The "Open in browser" link button: outside `askq:` / `askq.`, so its click (Slack
# reports those too) is not taken for an answer.
OPEN_BLOCK = "askq-open:"
OPEN_ACTION = "askq-open"


def question_block(request_id: str, question: int, group: str) -> str:
    return f"{BLOCK_PREFIX}{question}:{request_id}:{group}"


def submit_block(request_id: str, group: str) -> str:
    return f"{BLOCK_PREFIX}{SUBMIT}:{request_id}:{group}"


def split_block(block_id: str) -> tuple[str, str, str | None] | None:
    """`askq:<part>:<request id>[:<group>]` -> (part, request id, group or None); None
    when it is not ours."""
    if not block_id.startswith(BLOCK_PREFIX):
        return None
    part, sep, rest = block_id[len(BLOCK_PREFIX) :].partition(":")
    request_id, _, group = rest.partition(":")
    if not sep or not part or not request_id:
        return None
    return part, request_id, group or None
