"""The answerer groups as Redis has them, read (no writes): their priorities and
kinds, the live replicas of one, whether it may be live, and every group's status.
`Registry` (`_registry.py`) is these plus the writes."""

from __future__ import annotations

import json

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..protocol._checks import check_group
from ..protocol._models import GroupStatus
from ..protocol._settings import Settings
from ..redis._connections import redis_errors, server_ms
from ..redis._keys import Keys

DEFAULT_TTL_MS = 15_000  # a group entry without ttl_ms (lua/common.lua, DEFAULT_TTL_MS)


class RegistryReads:
    """Mixed into `Registry`, which sets these."""

    redis: Redis
    keys: Keys
    settings: Settings

    async def priorities(self) -> dict[str, int]:
        with redis_errors(self.settings):
            found = await self.redis.hgetall(self.keys.groups)  # type: ignore[misc]
        return {name: int(priority) for name, priority in found.items()}

    async def kinds(self) -> dict[str, str]:
        """Every registered group's channel kind, by group name."""
        with redis_errors(self.settings):
            infos = await self.redis.hgetall(self.keys.group_info)  # type: ignore[misc]
        return {name: json.loads(info).get("kind", "") for name, info in infos.items()}

    async def live_replicas(self, group: str) -> list[str]:
        check_group(group)
        with redis_errors(self.settings):
            now = await server_ms(self.redis)
            found: list[str] = await self.redis.zrangebyscore(
                self.keys.consumers(group), now + 1, "+inf"
            )
        return found

    async def may_be_live(self, group: str) -> bool:
        """A replica of the group is live, or the group's heartbeat is overdue by less
        than its TTL: it may be live and unable to beat (a stall, a failover), as
        routing reckons (lua/common.lua, route)."""
        if await self.live_replicas(group):
            return True
        with redis_errors(self.settings):
            now = await server_ms(self.redis)
            live_until = await self.redis.zscore(self.keys.live, group)
            raw = await self.redis.hget(self.keys.group_info, group)  # type: ignore[misc]
        if live_until is None:
            return False  # it left (stopped cleanly), or was never live
        try:
            ttl_ms = int(json.loads(raw or "{}").get("ttl_ms") or DEFAULT_TTL_MS)
        except (ValueError, TypeError, AttributeError):
            ttl_ms = DEFAULT_TTL_MS
        return bool(float(live_until) + ttl_ms > now)

    async def statuses(self) -> list[GroupStatus]:
        """Every group: priority, kind, scope, live replicas, entries pending."""
        k, redis = self.keys, self.redis
        with redis_errors(self.settings):
            now = await server_ms(redis)
            infos = await redis.hgetall(k.group_info)  # type: ignore[misc]
            rows = []
            for name, priority in sorted(
                (await self.priorities()).items(), key=lambda kv: (kv[1], kv[0])
            ):
                info = json.loads(infos.get(name, "{}"))
                live = await redis.zcount(k.consumers(name), now + 1, "+inf")
                try:
                    pending = (await redis.xpending(k.tier(priority), name))["pending"]
                except ResponseError:
                    pending = 0
                rows.append(
                    GroupStatus(
                        name=name,
                        priority=priority,
                        kind=info.get("kind", ""),
                        scope=info.get("scope", {}),
                        live_consumers=live,
                        pending=pending,
                    )
                )
        return rows
