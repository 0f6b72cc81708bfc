"""What the model (and the human behind it) reads when an ask does not end with an
answer. In one place, because the model acts on these words: each says what happened
and what to do next. The words of a failed ask nobody could answer (NO_ANSWERER) are
in lua/common.lua, where that settlement is written."""

from __future__ import annotations

from ._errors import AskError, ErrorCode
from ._models import Settlement

ABORTED_MESSAGE = (
    "The user aborted this turn, so the question was withdrawn. Stop here and wait for"
    " the user's next message."
)
TIMED_OUT_MESSAGE = (
    "Nobody answered this question in time. Continue with your best judgement, or report"
    " the open question in your final result."
)
WITHDRAWN_MESSAGE = (
    "This call was cancelled (its abort signal fired or its task was cancelled), so the"
    " question was withdrawn before anyone answered. Stop here and wait for the user's"
    " next message."
)
CALLER_GONE_MESSAGE = "The process that asked this question stopped, so the question was withdrawn."
CLOSED_MESSAGE = (
    "This process stopped waiting for the answer (its askq client was closed), so the"
    " question was withdrawn."
)

# The settlement a reply waiter delivers for an ask whose request Redis no longer has.
LOST = Settlement(
    state="FAILED",
    code=ErrorCode.NOT_FOUND,
    message="Redis lost this question (it restarted without its data), so nobody can"
    " answer it now. Ask again if it still matters.",
).model_dump_json(exclude_none=True)

# What a caller still waiting on a request is told when another call with the same
# idempotency key takes the request over.
TAKEN_OVER = Settlement(
    state="CANCELLED",
    code=ErrorCode.ABORTED,
    message="Another call with the same idempotency key took over this question; its"
    " answer goes to that call.",
    by="idempotency key",
).model_dump_json(exclude_none=True)


def delegated(agent_id: str, owner: str) -> AskError:
    return AskError(
        ErrorCode.DELEGATED_CALLER,
        f"Agent {agent_id!r} is a sub-agent owned by live agent {owner!r}, so it"
        " cannot ask the user. Do not call ask_user_question again: put your unresolved"
        " questions and decisions in your final result, and the agent that owns you will"
        " take them to the user.",
    )


def closed() -> AskError:
    """What an ask still waiting when its seam closes ends with."""
    return AskError(ErrorCode.ABORTED, CLOSED_MESSAGE)
