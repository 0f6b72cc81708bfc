"""The deployment's recent settlements, newest first: who answered, through which group,
how long it took (a dashboard's "recent settlements"; `GroupHandle.recent_settlements`).

Read from the capped `{p}:recent` index the settling scripts keep (lua/common.lua) and
each request's hash and the tail of its audit trail: one ZREVRANGE and one pipelined
round trip of a few reads per row, whatever the deployment's size. Plain reads only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel
from redis.asyncio import Redis

from ..protocol._models import AskRequest, RequestState
from ..protocol._reasons import why_cancelled
from ..protocol._settings import Settings
from ..redis._connections import redis_errors, server_ms
from ..redis._keys import Keys
from ._audit import parse_trail

if TYPE_CHECKING:
    from ..seam._seam import Seam

MAX_RECENT = 200  # rows one read may ask for, whatever the caller passes
TRAIL_TAIL = 4  # the settling entry is the trail's last (or nearly)


class RecentSettlement(BaseModel):
    """One settled request. `by`: who answered (or cancelled); `group`: the group it
    was answered through (None when not answered by a group, e.g. a default)."""

    id: str
    state: RequestState
    by: str = ""
    group: str | None = None
    tier: int | None = None
    code: str = ""
    reason: str = ""
    header: str = ""
    question: str = ""  # the first question's text
    questions: int = 1  # how many the request asked
    agent: str = ""
    created_ms: int | None = None
    settled_ms: int
    took_seconds: float | None = None
    age_seconds: float = 0.0  # since it settled, on the server's clock

    @property
    def outcome(self) -> str:
        """What happened, as a person reads it (agent text in it stays data)."""
        if self.state == RequestState.ANSWERED:
            if not self.by:
                return "answered with the ask's default"
            return f"answered by {self.by}" + (f" through {self.group}" if self.group else "")
        if self.state == RequestState.CANCELLED:
            return f"cancelled: {why_cancelled(self.reason, self.code) or 'withdrawn'}"
        return f"failed: {self.code or '?'}"


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") and str(value).isdigit() else None


async def recent_settlements(
    redis: Redis, keys: Keys, settings: Settings, limit: int
) -> list[RecentSettlement]:
    """The `limit` (at most MAX_RECENT) latest settlements still kept, newest first."""
    # (recent_max too: the index is trimmed by some settlements only, lua/common.lua)
    limit = max(0, min(int(limit), MAX_RECENT, settings.recent_max))
    if limit == 0:
        return []
    fields = ["state", "by", "code", "reason", "tier", "created_ms", "settled_ms", "payload"]
    with redis_errors(settings):
        now = await server_ms(redis)
        ids = await redis.zrange(keys.recent, 0, limit - 1, desc=True, withscores=True)
        if not ids:
            return []
        async with redis.pipeline(transaction=False) as pipe:
            for request_id, _ in ids:
                pipe.hmget(keys.request(request_id), fields)
                pipe.get(keys.payload(request_id))
                pipe.lrange(keys.audit(request_id), -TRAIL_TAIL, -1)
            replies = await pipe.execute()
    out = []
    for i, (request_id, score) in enumerate(ids):
        row, payload, trail = replies[3 * i : 3 * i + 3]
        state, by, code, reason, tier, created, settled, old_payload = row
        payload = payload or old_payload
        if state is None or payload is None:
            continue  # expired (the index forgets it at its next trim)
        request = AskRequest.model_validate_json(payload)
        answered = [e for e in parse_trail(trail) if e.e == "answered"]
        created_ms = _int(created) or request.created_ms
        settled_ms = _int(settled) or int(score)
        out.append(
            RecentSettlement(
                id=request_id,
                state=RequestState(state),
                by=by or "",
                group=answered[-1].group if answered else None,
                tier=_int(tier),
                code=code or "",
                reason=reason or "",
                header=request.questions[0].header,
                question=request.questions[0].question,
                questions=len(request.questions),
                agent=request.caller.agent_id,
                created_ms=created_ms,
                settled_ms=settled_ms,
                took_seconds=(settled_ms - created_ms) / 1000 if created_ms else None,
                age_seconds=max(0, now - settled_ms) / 1000,
            )
        )
    return out


async def recent_in_shards(seam: Seam, limit: int) -> list[RecentSettlement]:
    """The latest settlements over every shard of the seam's deployment, newest first."""
    if len(seam.shards) == 1:
        return await recent_settlements(seam.redis, seam.shards[0].keys, seam.settings, limit)
    rows: list[RecentSettlement] = []
    for shard in seam.shards:
        rows += await recent_settlements(seam.redis, shard.keys, seam.settings, limit)
    rows.sort(key=lambda row: row.settled_ms, reverse=True)
    return rows[: max(0, min(int(limit), MAX_RECENT))]
