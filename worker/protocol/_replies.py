"""What a script replies: a kind (the first element of its reply table) and values, as
its header's `replies:` line lists them. The kinds that mean "no" become AskErrors in
one function, `refusal`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ._errors import AskError, ErrorCode
from ._messages import ABORTED_MESSAGE, delegated
from ._reasons import why_cancelled
from ._text import quoted


class Reply(StrEnum):
    # ask.lua
    OFFERED = "OFFERED"  # published, offered to a tier: tier, entry
    ATTACHED = "ATTACHED"  # reattached to the request: tier
    ABORTED = "ABORTED"  # the turn is aborted (abort_turn: done, and how many it cancelled)
    DELEGATED_CALLER = "DELEGATED_CALLER"  # its owner is live: owner
    NO_ANSWERER = "NO_ANSWERER"  # no tier has a live group: message
    EXISTS = "EXISTS"  # the idempotency key was used for other questions
    OWNER = "OWNER"  # run again with this owner's agent key declared: owner
    REDIRECT = "REDIRECT"  # run again on the request the idempotency index names: id
    GONE = "GONE"  # the request the index named expired: run again on a new one
    WAIT = "WAIT"  # no group, but the registry was lost a moment ago: again within ms
    # every request script
    SETTLED = "SETTLED"  # already settled: state, by, code (ask: its settlement body)
    NOT_FOUND = "NOT_FOUND"  # no such request (never was, or expired)
    STALE = "STALE"  # the caller's view (tiers, inbox) is out of date; nothing changed
    # a group's decisions and answers
    CLAIMED = "CLAIMED"  # accepted (decline: the group holds a claim instead)
    STALE_OFFER = "STALE_OFFER"  # the offer moved on, or was settled
    NOT_OFFERED = "NOT_OFFERED"  # the group is not among those deciding it
    NOT_CLAIMED = "NOT_CLAIMED"  # the group holds no claim: state
    DECLINED = "DECLINED"  # state
    RELEASED = "RELEASED"  # state
    ANSWERED = "ANSWERED"
    CANCELLED = "CANCELLED"
    # fire.lua
    FIRED = "FIRED"  # state
    MOOT = "MOOT"  # a transition made the timer moot; dropped
    # the registry
    OK = "OK"  # registered: '1' if something had to be written again
    CONFLICT = "CONFLICT"  # the group is registered otherwise: priority, info JSON
    REMOVED = "REMOVED"
    MOVED = "MOVED"  # set_priority: the group is at its new priority
    LIVE = "LIVE"  # not removed, a replica is live: how many (reap_caller: the caller is)
    REAPED = "REAPED"  # reap_caller: the gone caller's asks cancelled: how many


@dataclass(frozen=True, slots=True)
class ScriptReply:
    kind: Reply
    values: tuple[str, ...] = ()

    @classmethod
    def of(cls, raw: Any) -> ScriptReply:
        """From the script's reply table; an unknown kind is a bug (AskError INTERNAL)."""
        try:
            return cls(Reply(raw[0]), tuple(str(v) for v in raw[1:]))
        except (ValueError, TypeError, IndexError):
            raise AskError(ErrorCode.INTERNAL, f"unexpected script reply: {raw!r}") from None

    def value(self, index: int, default: str = "") -> str:
        return self.values[index] if index < len(self.values) else default


def settled_detail(state: str, by: str, code: str, reason: str = "") -> str:
    """How a settled request is described to someone whose answer came too late."""
    if state == "ANSWERED":
        return f"answered by {by}" if by else "answered"
    if state == "CANCELLED":
        why = why_cancelled(reason, code)
        return f"cancelled ({why})" if why else "cancelled"
    return f"failed ({code})" if code else "failed"


def refusal(
    reply: ScriptReply,
    request_id: str,
    *,
    agent_id: str = "",
    idempotency_key: str | None = None,
) -> AskError:
    """The AskError a refusing reply stands for: of an ask (`agent_id`, the caller;
    `idempotency_key`, the key it gave) or of a group's decision or answer."""
    kind = reply.kind
    if kind is Reply.ABORTED:
        return AskError(ErrorCode.ABORTED, ABORTED_MESSAGE)
    if kind is Reply.DELEGATED_CALLER:
        return delegated(agent_id, reply.value(0))
    if kind is Reply.NO_ANSWERER:
        return AskError(ErrorCode.NO_ANSWERER, reply.value(0))
    if kind is Reply.EXISTS:
        return AskError(
            ErrorCode.INVALID_REQUEST,
            f"idempotency key {quoted(idempotency_key or '')} was already used for other"
            " questions; use a new key for a new ask",
        )
    if kind is Reply.SETTLED:
        detail = settled_detail(reply.value(0), reply.value(1), reply.value(2), reply.value(3))
        return AskError(ErrorCode.ALREADY_SETTLED, f"already settled: {detail}")
    if kind is Reply.NOT_FOUND:
        return AskError(ErrorCode.NOT_FOUND, f"no request {request_id!r} (unknown or expired)")
    if kind is Reply.NOT_CLAIMED:
        return AskError(
            ErrorCode.NOT_CLAIMED,
            f"this group holds no claim on request {request_id!r} (it is {reply.value(0).lower()})",
        )
    if kind in (Reply.STALE_OFFER, Reply.NOT_OFFERED):
        return AskError(
            ErrorCode.NOT_CLAIMED,
            f"this group holds no claim on request {request_id!r} (it is no longer offered"
            " to this group)",
        )
    return AskError(ErrorCode.INTERNAL, f"unexpected reply {kind.value} for {request_id!r}")
