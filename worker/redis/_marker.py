"""The `{prefix}:shards` marker: how many shards (`ASKQ_SHARDS`) a deployment's keys
are spread over, so processes that disagree cannot split it.

A request lives in the shard its turn names among N; a process that counted M shards
would look for it (and publish, register, fire timers) under other tags, and the two
halves would never meet. So a process checks the marker as it starts (`Seam`'s
`async with`, an answerer replica, a sweeper):

- no marker: it is written with this process's N (a deployment from before shards,
  with no marker, counts as 1 shard);
- the same N: nothing to do;
- another number M while any request is pending in the layout of M shards, or any
  answerer group is live there: CONFIG_ERROR naming both numbers (one process started
  with a wrong number must not split a running deployment);
- another number M with nothing pending and no group live: the marker is rewritten to
  N (the change after a drain, with every replica stopped). A replica or sweeper
  started with M after that is refused, and a replica still running with M stops at
  its next heartbeat (CONFIG_ERROR), so two numbers never serve side by side for long.

It is configuration, not a request's state, so plain commands (no script) write it.
"""

from __future__ import annotations

from redis.asyncio import Redis

from ..protocol._errors import AskError, ErrorCode
from ..protocol._settings import Settings
from ._connections import redis_errors, server_ms
from ._shards import Layout


async def pending_in(redis: Redis, layout: Layout) -> int:
    """Requests pending in the layout's shards."""
    return sum([int(await redis.zcard(keys.pending)) for keys in layout.all_keys])


async def live_in(redis: Redis, layout: Layout) -> int:
    """Answerer groups live in the layout's shards (the most in any one)."""
    now = await server_ms(redis)
    return max([int(await redis.zcount(k.live, now + 1, "+inf")) for k in layout.all_keys])


async def check_layout(redis: Redis, layout: Layout, settings: Settings) -> None:
    wanted = layout.shards
    with redis_errors(settings):
        recorded = await redis.get(layout.marker)
        if recorded is None:
            old = Layout(layout.prefix, 1)
            if wanted == 1 or not await pending_in(redis, old):
                await redis.set(layout.marker, wanted, nx=True)
                recorded = await redis.get(layout.marker)
            else:
                recorded = "1"  # keys from before the marker: one shard
        if recorded is None or int(recorded) == wanted:
            return
        have = int(recorded)
        old = Layout(layout.prefix, have)
        pending, live = await pending_in(redis, old), await live_in(redis, old)
        if pending or live:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_SHARDS is {wanted}, but deployment {layout.prefix!r} runs with"
                f" {have} shard(s) ({layout.marker}), with {pending} request(s) pending"
                f" and {live} answerer group(s) live: start every process with"
                f" ASKQ_SHARDS={have}, or stop them all and let the pending requests"
                f" settle before changing it",
            )
        # Nothing pending: the change after a drain. XX: written only over a marker.
        await redis.set(layout.marker, wanted, xx=True)


async def still_same_layout(redis: Redis, layout: Layout, settings: Settings) -> None:
    """A replica's heartbeat: CONFIG_ERROR once the deployment records another number
    of shards than this process runs with (one GET)."""
    with redis_errors(settings):
        recorded = await redis.get(layout.marker)
    if recorded is not None and int(recorded) != layout.shards:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"ASKQ_SHARDS is {layout.shards}, but deployment {layout.prefix!r}"
            f" now runs with {recorded} shard(s) ({layout.marker}): restart this"
            f" process with ASKQ_SHARDS={recorded}",
        )
