"""Why a request was cancelled. The error code the caller sees stays ABORTED (or
TIMED_OUT); the reason says which withdrawal it was, in the audit trail, `askq show`
and the channels' retractions (it travels in the request's hash and its settlement
event)."""

from __future__ import annotations

from enum import StrEnum


class CancelReason(StrEnum):
    """Why a request was cancelled, as the trail, `askq show` and the channels say it.
    The error code stays ABORTED (or TIMED_OUT); this says which withdrawal it was."""

    # The caller stopped waiting: its abort signal fired, or its task was cancelled.
    WITHDRAWN = "withdrawn"
    # The caller's process stopped beating; the sweeper withdrew its asks.
    CALLER_GONE = "caller gone"
    # `abort_turn`: the turn was aborted, from wherever.
    TURN_ABORTED = "turn aborted"
    # The ask's own timeout passed with no answer.
    TIMED_OUT = "timed out"


# What a person reads about a cancellation (the channels' retraction, `askq show`).
CANCELLED_BECAUSE = {
    CancelReason.WITHDRAWN: "the caller withdrew the question",
    CancelReason.CALLER_GONE: "the caller is gone",
    CancelReason.TURN_ABORTED: "the turn was aborted",
    CancelReason.TIMED_OUT: "the ask timed out",
}


def why_cancelled(reason: str | None, code: str | None) -> str | None:
    """What happened, from the reason a settlement carries (or, for one written
    before reasons were, from its code alone); None when that does not say."""
    try:
        return CANCELLED_BECAUSE[CancelReason(reason or "")]
    except ValueError:
        return CANCELLED_BECAUSE[CancelReason.TIMED_OUT] if code == "TIMED_OUT" else None


def cancelled_because(reason: str | None, code: str | None) -> str:
    """`cancelled: <what happened>`, or `cancelled` when nothing says."""
    why = why_cancelled(reason, code)
    return f"cancelled: {why}" if why else "cancelled"
