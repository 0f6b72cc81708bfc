"""The seam's reads, by role apart from its writes (`Seam`, which is these too): a
request's facts, state and settlement, the index of idempotency keys, the server's
clock, the groups' and the pending requests' status. One read each, or one pass over
the shards; nothing here changes a request."""

from __future__ import annotations

from redis.asyncio import Redis

from ..protocol._build import idempotency_digest
from ..protocol._checks import MAX_IDEMPOTENCY_KEY, check_group, check_request_id, check_text
from ..protocol._models import RequestStatus, Settlement, Status
from ..protocol._settings import Settings
from ..redis._connections import redis_errors, server_ms
from ..redis._requests import RequestInfo, Requests
from ..redis._scripts import Scripts
from ._registry import Registry
from ._sharded import Shard


class SeamReads:
    """Mixed into `Seam`, which sets these."""

    settings: Settings
    redis: Redis
    scripts: Scripts
    requests: Requests
    registry: Registry
    shards: list[Shard]

    async def request_info(self, request_id: str) -> RequestInfo:
        check_request_id(request_id)
        return await self.requests.info(request_id)

    async def holds(self, request_id: str, group: str) -> bool:
        """Whether the request is pending with `group` among its claimers (one read)."""
        check_request_id(request_id)
        check_group(group)
        return await self.requests.holds(request_id, group)

    async def settlement(self, request_id: str) -> Settlement | None:
        """The request's settlement, while its reply key lasts (None for an id that
        cannot be a request's)."""
        return await self.requests.settlement(request_id)

    async def idempotent_request(self, key: str) -> str | None:
        """The id of the request asked with idempotency key `key` (a tool-call id),
        while the request is kept."""
        return await self.requests.idempotent(
            idempotency_digest(check_text(key, "idempotency_key", MAX_IDEMPOTENCY_KEY))
        )

    async def now_ms(self) -> int:
        with redis_errors(self.settings):
            return await server_ms(self.redis)

    async def tier_streams(self, refresh: bool = False) -> list[str]:
        """Shard 0's tier streams (each shard has its own, of the same priorities)."""
        return await self.scripts.tier_streams(refresh)

    async def request_status(self, request_id: str) -> RequestStatus | None:
        return await self.requests.status(request_id, await self.now_ms())

    async def status(self, limit: int = 100) -> Status:
        """Groups (priority, live replicas, entries pending) and the oldest requests pending."""
        groups = await self.registry.statuses()
        ids = await self.pending_ids(limit)
        return Status(
            groups=groups, requests=await self.requests.statuses(ids, await self.now_ms())
        )

    async def pending_ids(self, limit: int = 100) -> list[str]:
        """The ids of the oldest `limit` requests pending, over every shard."""
        if limit <= 0:
            return []
        with redis_errors(self.settings):
            found: list[tuple[str, float]] = []
            for shard in self.shards:
                found += await self.redis.zrange(shard.keys.pending, 0, limit - 1, withscores=True)
        return [request_id for request_id, _ in sorted(found, key=lambda f: f[1])[:limit]]
