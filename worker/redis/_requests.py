"""The one reader of a request's state in Redis: its immutable facts (cached), its
hash's fields, whether an offer is still a group's, its settlement, its status row.

The runtime, the sweeper, status and the channels read requests here; only the scripts
(`_scripts.py`) write them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel
from redis.asyncio import Redis

from ..protocol._checks import REQUEST_ID_PATTERN, check_request_id
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import TERMINAL, AskRequest, RequestState, RequestStatus, Settlement
from ..protocol._settings import Settings
from ._connections import redis_errors
from ._keys import Keys, split_groups

INFO_CACHE = 8192
_FIELDS = [
    "state",
    "tier",
    "offer",
    "undecided",
    "claimers",
    "by",
    "code",
    "inbox",
    "created_ms",
    "reason",
]


class RequestInfo(BaseModel):
    """The immutable facts of a request, cached so worker-side scripts need no lookup."""

    request: AskRequest
    inbox: str


@dataclass(frozen=True)
class RequestRow:
    """A request's hash as it is now."""

    state: RequestState
    tier: int | None
    offer: str | None
    undecided: list[str]
    claimers: list[str]
    by: str
    code: str
    inbox: str | None
    created_ms: int | None
    reason: str = ""  # why it was cancelled (a CancelReason), once it was

    @property
    def settled(self) -> bool:
        return self.state in TERMINAL

    def held_by(self, group: str) -> bool:
        """Pending, with `group` among its claimers."""
        return not self.settled and group in self.claimers

    def offered_to(self, group: str, tier: int, entry: str) -> bool:
        """Offer entry `entry` of `tier` is still the group's: to decide or to answer."""
        return (
            not self.settled
            and self.offer == entry
            and self.tier == tier
            and group in self.undecided + self.claimers
        )


def _row(fields: Sequence[str | None]) -> RequestRow | None:
    state, tier, offer, undecided, claimers, by, code, inbox, created, reason = fields
    if state is None:
        return None
    return RequestRow(
        state=RequestState(state),
        tier=int(tier) if tier is not None else None,
        offer=offer,
        undecided=split_groups(undecided),
        claimers=split_groups(claimers),
        by=by or "",
        code=code or "",
        inbox=inbox,
        created_ms=int(created) if created is not None else None,
        reason=reason or "",
    )


class Requests:
    def __init__(self, redis: Redis, keys: Keys, settings: Settings) -> None:
        self.redis = redis
        self.keys = keys
        self.settings = settings
        self._infos: OrderedDict[str, RequestInfo] = OrderedDict()

    # --- the immutable facts ---------------------------------------------------------

    def remember(self, info: RequestInfo) -> None:
        """Cache a request's facts (the runtime learns them from offers). Request ids
        are never reused, so a cached entry never describes another request; the inbox
        may move (an idempotent ask reattached), which the scripts catch (STALE)."""
        self._infos[info.request.id] = info
        self._infos.move_to_end(info.request.id)
        while len(self._infos) > INFO_CACHE:
            self._infos.popitem(last=False)

    def forget(self, request_id: str) -> None:
        self._infos.pop(request_id, None)

    async def info(self, request_id: str, *, fresh: bool = False) -> RequestInfo:
        """The request's facts: cached, else (or when `fresh`) read. NOT_FOUND when
        Redis has no such request (never had, or it expired)."""
        info = None if fresh else self._infos.get(request_id)
        if info is not None:
            return info
        check_request_id(request_id)
        k = self.keys
        with redis_errors(self.settings):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(k.payload(request_id))
                pipe.hmget(k.request(request_id), ["inbox", "payload"])
                payload, (inbox, old_payload) = await pipe.execute()
        payload = payload or old_payload  # asked before the payload had its own key
        if payload is None:
            raise AskError(ErrorCode.NOT_FOUND, f"no request {request_id!r} (unknown or expired)")
        info = RequestInfo(request=AskRequest.model_validate_json(payload), inbox=inbox)
        self.remember(info)
        return info

    async def request(self, request_id: str) -> AskRequest:
        return (await self.info(request_id)).request

    # --- the hash, as it is now -------------------------------------------------------

    async def row(self, request_id: str, conn: Redis | None = None) -> RequestRow | None:
        """The request's state now (None: no such request). `conn`: a blocking loop's
        own connection, to read on."""
        with redis_errors(self.settings):
            fields = await (conn or self.redis).hmget(self.keys.request(request_id), _FIELDS)  # type: ignore[misc]
        return _row(fields)

    async def holds(self, request_id: str, group: str) -> bool:
        """Whether the request is pending with `group` among its claimers (one read)."""
        check_request_id(request_id)
        row = await self.row(request_id)
        return row is not None and row.held_by(group)

    async def settlement(self, request_id: str) -> Settlement | None:
        """The request's settlement, while its reply key lasts (None for an id that
        cannot be a request's)."""
        if not REQUEST_ID_PATTERN.fullmatch(request_id):
            return None
        with redis_errors(self.settings):
            body = await self.redis.get(self.keys.reply(request_id))
        return None if body is None else Settlement.model_validate_json(body)

    async def idempotent(self, digest: str) -> str | None:
        """The id of the request an idempotency key (its digest) asked, while kept."""
        with redis_errors(self.settings):
            request_id: str | None = await self.redis.get(self.keys.idem(digest))
        return request_id

    async def turn(self, turn_id: str) -> list[tuple[str, str | None, str | None]]:
        """The unsettled requests of a turn: (id, inbox, idempotency index key)."""
        k = self.keys
        with redis_errors(self.settings):
            ids = sorted(await self.redis.smembers(k.turn(turn_id)))  # type: ignore[misc]
            if not ids:
                return []
            async with self.redis.pipeline(transaction=False) as pipe:
                for request_id in ids:
                    pipe.hmget(k.request(request_id), ["inbox", "idem"])
                rows = await pipe.execute()
        return [(i, inbox, idem) for i, (inbox, idem) in zip(ids, rows, strict=True)]

    async def asked(self, process: str) -> list[tuple[str, str | None, str | None, str | None]]:
        """The requests a caller process has asked and not seen settle: (id, inbox, turn
        id, idempotency index key); the last three None for a request that is gone."""
        k = self.keys
        with redis_errors(self.settings):
            ids = sorted(await self.redis.smembers(k.asked(process)))  # type: ignore[misc]
            if not ids:
                return []
            async with self.redis.pipeline(transaction=False) as pipe:
                for request_id in ids:
                    pipe.hmget(k.request(request_id), ["inbox", "turn", "idem"])
                rows = await pipe.execute()
        return [(i, *row) for i, row in zip(ids, rows, strict=True)]

    # --- status ------------------------------------------------------------------------

    async def status(self, request_id: str, now_ms: int) -> RequestStatus | None:
        if not REQUEST_ID_PATTERN.fullmatch(request_id):
            return None  # no request has such an id
        rows = await self.statuses([request_id], now_ms)
        return rows[0] if rows else None

    async def statuses(self, ids: Sequence[str], now_ms: int) -> list[RequestStatus]:
        """Status rows of the requests that still exist, in the order given."""
        k = self.keys
        with redis_errors(self.settings):
            async with self.redis.pipeline(transaction=False) as pipe:
                for request_id in ids:
                    pipe.hmget(k.request(request_id), [*_FIELDS, "payload"])
                    pipe.get(k.payload(request_id))
                replies = await pipe.execute()
        out = []
        for request_id, fields, payload in zip(ids, replies[::2], replies[1::2], strict=True):
            row, payload = _row(fields[:-1]), payload or fields[-1]
            if row is None or payload is None:
                continue
            request = AskRequest.model_validate_json(payload)
            created = row.created_ms if row.created_ms is not None else now_ms
            out.append(
                RequestStatus(
                    id=request_id,
                    state=row.state,
                    tier=row.tier,
                    undecided=row.undecided,
                    claimers=row.claimers,
                    header=request.questions[0].header,
                    agent=request.caller.agent_id,
                    turn=request.caller.turn_id,
                    age_seconds=max(0, now_ms - created) / 1000,
                    by=row.by,
                    code=row.code,
                )
            )
        return out
