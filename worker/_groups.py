"""The answerer groups as an operator sees them: list, remove, prune (`askq group`).

A group is registered by its replicas (lua/register) with one priority and one scope.
Changing either is deliberate: stop the group's replicas, `remove` it, start them with
the new values. Removing gives back everything the group holds (claims released,
offers declined, so the waterfall moves on) and then forgets it (lua/remove_group);
`prune` removes every group with no live replica. The sweeper gives back what a group
with no live replica holds the same way (`give_back_all`), after a grace period.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from redis.exceptions import ResponseError

from ._errors import AskError, ErrorCode
from ._keys import split_groups
from ._seam import Seam

log = logging.getLogger("askq.groups")

PAGE = 100
ADMIN_CONSUMER = "askq-admin"


async def give_back(seam: Seam, group: str, tier: int, entry_id: str, request_id: str) -> int:
    """The group can no longer act on offer entry `entry_id` of request `request_id`:
    release its claim, or decline for it; acknowledge an entry that is no longer
    anyone's. Returns 1 when the request moved on."""
    k, redis = seam.keys, seam.redis
    state, offer, undecided, claimers = await redis.hmget(  # type: ignore[misc]
        k.request(request_id), ["state", "offer", "undecided", "claimers"]
    )
    try:
        if state and offer == entry_id and group in split_groups(claimers):
            log.warning("releasing %s: group %s cannot answer it", request_id, group)
            return int(await seam.release(request_id, group))
        if state and offer == entry_id and group in split_groups(undecided):
            log.warning("declining %s for %s: the group cannot decide it", request_id, group)
            await seam.decline_entry(request_id, group, tier, entry_id)
            return 1
    except AskError as exc:
        if exc.code == ErrorCode.REDIS_UNAVAILABLE:
            raise
    await redis.xack(k.tier(tier), group, entry_id)  # no longer anyone's
    return 0


async def give_back_all(
    seam: Seam, group: str, tier: int, consumer: str, idle_ms: int, now_ms: int
) -> int:
    """Give back every entry the group holds that has waited `idle_ms`: those pending
    on its (gone) replicas, and those offered to it that no replica ever read. Returns
    how many requests moved on."""
    k, redis = seam.keys, seam.redis
    stream, cursor, moved = k.tier(tier), "0-0", 0
    try:
        while True:  # delivered to a replica, never acknowledged
            reply = await redis.xautoclaim(stream, group, consumer, idle_ms, cursor, count=PAGE)
            cursor, entries = reply[0], reply[1]
            for entry_id, fields in entries:
                moved += await give_back(seam, group, tier, entry_id, _request(fields))
            if cursor == "0-0":
                break
        # Offered while no replica was reading: never delivered, so in no replica's
        # pending list; older than `idle_ms` by its id (ms since the epoch).
        last = next(
            (
                g["last-delivered-id"]
                for g in await redis.xinfo_groups(stream)
                if g["name"] == group
            ),
            None,
        )
        while last is not None:
            entries = await redis.xrange(stream, f"({last}", now_ms - idle_ms, count=PAGE)
            for entry_id, fields in entries:
                moved += await give_back(seam, group, tier, entry_id, _request(fields))
            last = entries[-1][0] if len(entries) == PAGE else None
    except ResponseError:  # no such stream or group
        return moved
    finally:
        with contextlib.suppress(ResponseError):
            await redis.xgroup_delconsumer(stream, group, consumer)
    return moved


def _request(fields: Any) -> str:
    return str((fields or {}).get("request", ""))


async def live_replicas(seam: Seam, group: str) -> list[str]:
    now = await seam.now_ms()
    found: list[str] = await seam.redis.zrangebyscore(seam.keys.consumers(group), now + 1, "+inf")
    return found


async def remove_group(seam: Seam, group: str) -> int:
    """Give back what the group holds and forget it. Refused (CONFIG_ERROR) while a
    replica of it is live: that replica would register it again at once. Returns how
    many requests moved on."""
    k = seam.keys
    with seam.redis_errors():
        priority = await seam.redis.hget(k.groups, group)  # type: ignore[misc]
        if priority is None:
            raise AskError(ErrorCode.NOT_FOUND, f"no group {group!r} is registered")
        live = await live_replicas(seam, group)
        if live:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"group {group} has {len(live)} live replica(s) ({', '.join(live)}):"
                " stop them first, then remove it",
            )
        moved = await give_back_all(
            seam, group, int(priority), ADMIN_CONSUMER, 0, await seam.now_ms()
        )
        result = await seam.call(
            "remove_group",
            [k.groups, k.group_info, k.live, k.consumers(group), k.tier(int(priority))],
            [group],
        )
    if result[0] == "LIVE":
        raise AskError(
            ErrorCode.CONFIG_ERROR, f"group {group} has a live replica again: stop it first"
        )
    await seam.tier_streams(refresh=True)
    return moved


async def prune_groups(seam: Seam) -> list[str]:
    """Remove every group with no live replica; returns their names."""
    with seam.redis_errors():
        names = sorted(await seam.redis.hkeys(seam.keys.groups))  # type: ignore[misc]
    removed = []
    for name in names:
        if await live_replicas(seam, name):
            continue
        with contextlib.suppress(AskError):  # came back, or removed meanwhile
            await remove_group(seam, name)
            removed.append(name)
    return removed
