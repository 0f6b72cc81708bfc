"""Reading what happened to requests: one request in full (`askq show`), the recent
and pending ones (`askq requests`), and the deployment's audit stream (`askq audit
tail`).

The trail itself is written by the scripts (lua/common.lua, `audit`): each transition
appends one JSON entry to `{p}:audit:<id>` in the same step, so the trail and the state
never disagree; it expires with the request. This module only reads it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from redis.asyncio import Redis

from ..protocol._checks import check_request_id
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import TERMINAL, Answer, AskRequest, Question, RequestState, Settlement
from ..protocol._reasons import why_cancelled
from ..protocol._settings import Settings
from ..redis._connections import redis_errors, server_ms
from ..redis._keys import Keys, split_groups
from ..redis._shards import Layout

PAGE = 200


class AuditEntry(BaseModel):
    """One transition: `t` the server time (ms), `e` the event, then its facts."""

    model_config = ConfigDict(extra="allow")

    t: int
    e: str
    group: str | None = None
    groups: str | None = None  # comma-joined (offered)
    tier: int | None = None
    by: str | None = None
    code: str | None = None
    reason: str | None = None

    def describe(self, agent: str | None = None, turn: str | None = None) -> str:
        """The entry as a sentence (agent text in it is data: the caller escapes it).
        `agent`, `turn`: the request's caller (an `asked` entry does not repeat them)."""
        e, group = self.e, self.group or "?"
        tier = f" (tier {self.tier})" if self.tier is not None else ""
        if e == "asked":
            facts = self.model_extra or {}
            more = [f"owner {facts['owner']}"] if facts.get("owner") else []
            if facts.get("timeout_ms"):
                more.append(f"timeout {int(facts['timeout_ms']) / 1000:g} s")
            if facts.get("idempotent"):
                more.append("idempotent")
            if agent is None:
                return "asked" + (f" ({', '.join(more)})" if more else "")
            tail = f", {', '.join(more)}" if more else ""
            return f"asked by agent {agent} (turn {turn}{tail})"
        if e == "offered":
            groups = ", ".join(split_groups(self.groups))
            if (self.model_extra or {}).get("overdue"):  # route() in lua/common.lua
                return f"offered to tier {self.tier}: {groups} (none live: its heartbeat overdue)"
            return f"offered to tier {self.tier}: {groups}"
        if e == "reattached":
            process = (self.model_extra or {}).get("process", "?")
            return f"the caller reattached (process {process})"
        phrases = {
            "accepted": f"accepted by {group}{tier}",
            "declined": f"declined by {group}{tier}",
            "window_missed": f"{group} missed its decision window{tier}",
            "overdue": f"{group} did not beat again in time: taken as gone{tier}",
            "reminded": f"{group} reminded its humans{tier}",
            "escalated": f"escalated: {group} did not answer in time{tier}",
            "released": f"released by {group}{tier}",
            "defaulted": "answered with the ask's default on timeout",
            "timed_out": "timed out (nobody answered in time)",
        }
        if e in phrases:
            return phrases[e]
        if e == "answered":
            through = f" through {self.group}" if self.group else ""
            return f"answered by {self.by or '?'}{through}"
        if e == "cancelled":
            why = why_cancelled(self.reason, self.code) or "withdrawn"
            by = f" (by {self.by})" if self.by else ""
            return f"cancelled: {why}{by}"
        if e == "failed":
            return f"failed: {self.code or '?'}" + (
                " (no tier left with a live group)" if self.code == "NO_ANSWERER" else ""
            )
        return e


def parse_trail(lines: Sequence[str]) -> list[AuditEntry]:
    """The trail's entries; one that does not parse (written by hand?) is skipped."""
    out = []
    for line in lines:
        try:
            out.append(AuditEntry.model_validate_json(line))
        except ValidationError:
            continue
    return out


# The trail's events that settle a request (`settled_event` in lua/common.lua).
SETTLED_EVENTS = frozenset({"answered", "defaulted", "timed_out", "cancelled", "failed"})


async def settlement_counts(redis: Redis, keys: Keys, ids: Sequence[str]) -> dict[str, int]:
    """request id -> how many settlements its trail records (1 for a settled request,
    0 for one pending or never made; more would be a double settlement). What the fault
    tests and the soak check: the trail is written in the step that settles, and, unlike
    the events stream, a settlement with no claim to retract is recorded there too."""
    out: dict[str, int] = {}
    for start in range(0, len(ids), PAGE):
        page = [i for i in ids[start : start + PAGE] if i]
        async with redis.pipeline(transaction=False) as pipe:
            for request_id in page:
                pipe.lrange(keys.audit(request_id), 0, -1)
            trails = await pipe.execute()
        for request_id, trail in zip(page, trails, strict=True):
            out[request_id] = sum(1 for entry in parse_trail(trail) if entry.e in SETTLED_EVENTS)
    return out


class RequestDetail(BaseModel):
    """Everything `askq show` tells about one request."""

    id: str
    state: RequestState
    code: str = ""
    by: str = ""
    reason: str = ""
    tier: int | None = None
    undecided: list[str] = []
    claimers: list[str] = []
    created_ms: int | None = None
    settled_ms: int | None = None
    questions: list[Question] = []
    scope: dict[str, str] = {}
    agent: str = ""
    turn: str = ""
    owner: str | None = None
    idempotent: bool = False
    answers: list[Answer] | None = None
    defaulted: bool = False
    message: str | None = None  # what the caller was told when it did not get answers
    timeline: list[AuditEntry] = []

    @property
    def outcome(self) -> str:
        """One line: where it is, or how it ended."""
        if self.state == "ANSWERED":
            if self.defaulted:
                return "ANSWERED with the default (timeout)"
            group = next((e.group for e in self.timeline if e.e == "answered" and e.group), None)
            through = f" through {group}" if group else ""
            return f"ANSWERED by {self.by or '?'}{through}"
        if self.state == "CANCELLED":
            return (
                f"CANCELLED ({self.code}): {why_cancelled(self.reason, self.code) or 'withdrawn'}"
            )
        if self.state == "FAILED":
            return f"FAILED ({self.code})"
        waiting = ", ".join(self.claimers or self.undecided) or "-"
        return f"{self.state} at tier {self.tier}, waiting on {waiting}"


class RequestSummary(BaseModel):
    """One row of `askq requests`."""

    id: str
    state: RequestState
    code: str = ""
    reason: str = ""
    by: str = ""
    tier: int | None = None
    header: str = ""
    agent: str = ""
    turn: str = ""
    groups: list[str] = []  # every group it was offered to, in order
    created_ms: int | None = None
    settled_ms: int | None = None
    age_seconds: float = 0.0


@dataclass(frozen=True)
class RequestFilter:
    """What `askq requests` keeps: a state (a RequestState, `pending` or `settled`),
    an agent, a turn, a group it was offered to."""

    state: str | None = None
    agent: str | None = None
    turn: str | None = None
    group: str | None = None

    def keeps(self, row: RequestSummary) -> bool:
        if self.state == "pending" and row.state in TERMINAL:
            return False
        if self.state == "settled" and row.state not in TERMINAL:
            return False
        if self.state not in (None, "pending", "settled") and row.state != self.state:
            return False
        if self.agent is not None and row.agent != self.agent:
            return False
        if self.turn is not None and row.turn != self.turn:
            return False
        return self.group is None or self.group in row.groups


STATES = ["pending", "settled", *[s.value for s in RequestState]]


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


class Audit:
    """The reader (`askq show`, `requests`, `audit tail`)."""

    def __init__(
        self, redis: Redis, keys: Keys, settings: Settings, layout: Layout | None = None
    ) -> None:
        """`layout`: the deployment's shards (`ASKQ_SHARDS`), read together; else the
        one keyspace `keys` (`tail` follows `keys`' stream: one Audit per shard)."""
        self.redis = redis
        self.keys = keys
        self.settings = settings
        self._layout = layout
        self._all = layout.all_keys if layout is not None else (keys,)

    def _keys_of(self, request_id: str) -> Keys:
        if self._layout is None:
            return self.keys
        return self._layout.keys(self._layout.of_request(request_id))

    async def show(self, request_id: str) -> RequestDetail:
        check_request_id(request_id)
        k = self._keys_of(request_id)
        with redis_errors(self.settings):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(k.request(request_id))
                pipe.get(k.payload(request_id))
                pipe.get(k.reply(request_id))
                pipe.lrange(k.audit(request_id), 0, -1)
                fields, payload, reply, trail = await pipe.execute()
        payload = payload or fields.get("payload")
        if not fields or payload is None:
            raise AskError(ErrorCode.NOT_FOUND, f"no request {request_id!r} (unknown or expired)")
        request = AskRequest.model_validate_json(payload)
        settlement = Settlement.model_validate_json(reply) if reply else None
        detail = RequestDetail(
            id=request_id,
            state=RequestState(fields.get("state", "OFFERED")),
            code=fields.get("code", ""),
            by=fields.get("by", ""),
            reason=fields.get("reason", ""),
            tier=_int(fields.get("tier")),
            undecided=split_groups(fields.get("undecided")),
            claimers=split_groups(fields.get("claimers")),
            created_ms=_int(fields.get("created_ms")) or request.created_ms,
            settled_ms=_int(fields.get("settled_ms")),
            questions=request.questions,
            scope=request.scope,
            agent=request.caller.agent_id,
            turn=request.caller.turn_id,
            owner=request.caller.owner,
            idempotent=request.idempotency is not None,
            timeline=parse_trail(trail),
        )
        if settlement is not None:
            detail.answers = settlement.answers
            detail.defaulted = bool(settlement.defaulted)
            detail.message = settlement.message
        return detail

    async def requests(self, keep: RequestFilter, limit: int) -> list[RequestSummary]:
        """The pending requests and the recent settled ones that `keep` keeps, newest
        first, at most `limit`."""
        with redis_errors(self.settings):
            now = await server_ms(self.redis)
            pending: list[tuple[str, float]] = []
            recent: list[tuple[str, float]] = []
            for k in self._all:  # every shard's
                if keep.state != "settled":
                    pending += await self.redis.zrange(k.pending, 0, -1, desc=True, withscores=True)
                if keep.state != "pending":  # (the index may hold a few more: common.lua)
                    recent += await self.redis.zrange(
                        k.recent, 0, self.settings.recent_max - 1, desc=True, withscores=True
                    )
        # Newest first, by creation for the pending and settlement for the settled
        # (a request settled between the two reads is listed once).
        seen: set[str] = set()
        ids = []
        for request_id, _ in sorted([*pending, *recent], key=lambda kv: -kv[1]):
            if request_id not in seen:
                seen.add(request_id)
                ids.append(request_id)
        out: list[RequestSummary] = []
        for start in range(0, len(ids), PAGE):
            for row in await self._summaries(ids[start : start + PAGE], now):
                if keep.keeps(row):
                    out.append(row)
                    if len(out) >= limit:
                        return out
        return out

    async def _summaries(self, ids: Sequence[str], now: int) -> list[RequestSummary]:
        fields = ["state", "code", "reason", "by", "tier", "created_ms", "settled_ms", "payload"]
        with redis_errors(self.settings):
            async with self.redis.pipeline(transaction=False) as pipe:
                for request_id in ids:
                    k = self._keys_of(request_id)
                    pipe.hmget(k.request(request_id), fields)
                    pipe.get(k.payload(request_id))
                    pipe.lrange(k.audit(request_id), 0, -1)
                replies = await pipe.execute()
        out = []
        for i, request_id in enumerate(ids):
            row, payload, trail = replies[3 * i : 3 * i + 3]
            state, code, reason, by, tier, created, settled, old_payload = row
            payload = payload or old_payload
            if state is None or payload is None:
                continue  # expired meanwhile
            request = AskRequest.model_validate_json(payload)
            groups: list[str] = []
            for entry in parse_trail(trail):
                for group in [*split_groups(entry.groups), *filter(None, [entry.group])]:
                    if group not in groups:
                        groups.append(group)
            created_ms = _int(created) or request.created_ms
            out.append(
                RequestSummary(
                    id=request_id,
                    state=RequestState(state),
                    code=code or "",
                    reason=reason or "",
                    by=by or "",
                    tier=_int(tier),
                    header=request.questions[0].header,
                    agent=request.caller.agent_id,
                    turn=request.caller.turn_id,
                    groups=groups,
                    created_ms=created_ms,
                    settled_ms=_int(settled),
                    age_seconds=max(0, now - created_ms) / 1000,
                )
            )
        return out

    async def tail(self, conn: Redis, *, last: int, follow: bool) -> AsyncIterator[dict[str, Any]]:
        """The audit stream's entries (`{"request": id, **entry}`): the `last` ones,
        then, when `follow`, each new one as it is written (on `conn`, a blocking
        connection of its own)."""
        stream = self.keys.audit_log
        with redis_errors(self.settings):
            found = await self.redis.xrevrange(stream, count=max(last, 1))
        # From the newest entry on (from the start, for a stream not there yet):
        # nothing written between two reads is missed.
        cursor = found[0][0] if found else "0-0"
        for entry_id, fields in reversed(found[:last]):
            yield _stream_entry(entry_id, fields)
        while follow:
            block_ms = int(self.settings.block_seconds * 1000)
            with redis_errors(self.settings):
                reply = await conn.xread({stream: cursor}, block=block_ms, count=PAGE)
            for _, entries in reply:
                for entry_id, fields in entries:
                    cursor = entry_id
                    yield _stream_entry(entry_id, fields)


def _stream_entry(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    try:
        entry = json.loads(fields.get("entry", "{}"))
    except ValueError:
        entry = {"e": "unreadable", "raw": fields.get("entry")}
    return {"id": entry_id, "request": fields.get("request", ""), **entry}
