"""What `askq status` shows: the groups with each live replica and its heartbeat age,
the sweepers with theirs, the pending requests counted by state and tier (and the
oldest listed), and the channel sends that gave up.

Read with plain reads (status writes nothing); ages are on the server's clock.
"""

from __future__ import annotations

import json
from collections import Counter

from pydantic import BaseModel
from redis.asyncio import Redis

from ..protocol._models import GroupStatus, Status
from ..redis._connections import redis_errors, server_ms
from ..redis._keys import Keys
from ..seam._seam import Seam

FAILED_SHOWN = 5


class ReplicaStatus(BaseModel):
    name: str
    beat_age_seconds: float | None  # None: it has not beaten since status knew to look
    # What is left of its registration: each beat renews it, so this is how long it
    # stays counted live if it stops beating now (not how long it has been up).
    lapses_in_seconds: float


class GroupDetail(GroupStatus):
    replicas: list[ReplicaStatus] = []


class SweeperStatus(BaseModel):
    name: str  # host:pid
    beat_age_seconds: float
    live: bool  # beat within its TTL
    fired: int  # timers it fired since it started


class FailedSend(BaseModel):
    id: str  # the stream entry (its ms is when it gave up)
    queue: str
    kind: str
    job: str
    request: str
    error: str
    tries: int


class FullStatus(Status):
    groups: list[GroupDetail]  # type: ignore[assignment]
    sweepers: list[SweeperStatus] = []
    pending_by_state: dict[str, int] = {}
    pending_by_tier: dict[str, int] = {}
    pending_total: int = 0
    failed_sends_total: int = 0  # kept: the latest FAILURES_KEPT or so
    failed_sends: list[FailedSend] = []  # the latest few, newest first


async def full_status(seam: Seam, limit: int) -> FullStatus:
    base = await seam.status(limit=limit)
    k, redis = seam.keys, seam.redis
    replicas_at = seam.shards[0].keys  # every replica registers in every shard
    with redis_errors(seam.settings):
        now = await server_ms(redis)
        groups = []
        for g in base.groups:
            live = await redis.zrangebyscore(
                replicas_at.consumers(g.name), now + 1, "+inf", withscores=True
            )
            beats = await redis.hgetall(replicas_at.beats(g.name))  # type: ignore[misc]
            replicas = [
                ReplicaStatus(
                    name=name,
                    beat_age_seconds=(now - int(beats[name])) / 1000 if name in beats else None,
                    lapses_in_seconds=(until - now) / 1000,
                )
                for name, until in live
            ]
            groups.append(GroupDetail(**g.model_dump(), replicas=replicas))
        sweepers = []
        for name, raw in sorted((await redis.hgetall(k.sweepers)).items()):  # type: ignore[misc]
            try:
                facts = json.loads(raw)
                age = now - int(facts["beat_ms"])
                sweepers.append(
                    SweeperStatus(
                        name=name,
                        beat_age_seconds=age / 1000,
                        live=age < int(facts["ttl_ms"]),
                        fired=int(facts.get("fired", 0)),
                    )
                )
            except (ValueError, TypeError, KeyError):
                continue
        by_state, by_tier = await _pending_counts(seam)
        failures = await redis.xrevrange(k.send_failures, count=FAILED_SHOWN)
        failed_total = await redis.xlen(k.send_failures)
    return FullStatus(
        groups=groups,
        requests=base.requests,
        sweepers=sweepers,
        pending_by_state=dict(sorted(by_state.items())),
        pending_by_tier={str(t): n for t, n in sorted(by_tier.items())},
        pending_total=sum(by_state.values()),
        failed_sends_total=failed_total,
        failed_sends=[
            FailedSend(
                id=entry_id,
                queue=f.get("queue", ""),
                kind=f.get("kind", ""),
                job=f.get("job", ""),
                request=f.get("request", ""),
                error=f.get("error", ""),
                tries=int(f.get("tries") or 0),
            )
            for entry_id, f in failures
        ],
    )


async def _pending_counts(seam: Seam) -> tuple[Counter[str], Counter[int]]:
    """Every pending request counted by state and by tier (in pages), in every shard."""
    redis = seam.redis
    by_state: Counter[str] = Counter()
    by_tier: Counter[int] = Counter()
    for shard in seam.shards:
        await _count_pending(redis, shard.keys, by_state, by_tier)
    return by_state, by_tier


async def _count_pending(
    redis: Redis, k: Keys, by_state: Counter[str], by_tier: Counter[int]
) -> None:
    start, page = 0, 500
    while True:
        ids = await redis.zrange(k.pending, start, start + page - 1)
        if not ids:
            break
        async with redis.pipeline(transaction=False) as pipe:
            for request_id in ids:
                pipe.hmget(k.request(request_id), ["state", "tier"])
            rows = await pipe.execute()
        for state, tier in rows:
            if state is not None:
                by_state[state] += 1
                if tier is not None:
                    by_tier[int(tier)] += 1
        start += page
