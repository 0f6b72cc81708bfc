"""A seam over several shards (`ASKQ_SHARDS` > 1, `_shards.py`).

Each shard is the whole seam of one keyspace (`Shard`: its requests, scripts, caller
side, group side, registry), all sharing the process's one bounded command client. The
classes below stand in for one role over every shard, by the same interface, so what
takes a seam's `requests` or `answering` (a channel's GroupHandle, the CLI) works as
before: a call about a request goes to the shard its id names; the registry's
administration runs in every shard (each holds a copy of the registry, written by the
replicas' registration in every shard); its reads come from shard 0's copy.

With one shard none of this is used: the seam's roles are shard 0's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis

from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import Answers, GroupStatus, Offer, RequestStatus, Settlement
from ..protocol._replies import Reply
from ..protocol._settings import Settings
from ..redis._keys import Keys
from ..redis._requests import RequestInfo, RequestRow, Requests
from ..redis._scripts import Scripts
from ..redis._shards import Layout
from ._answering import Answering
from ._asking import Asking
from ._registry import Entry, GroupSpec, Registry


class Shard:
    """One shard: a keyspace and the seam's roles over it."""

    def __init__(
        self,
        index: int,
        layout: Layout,
        redis: Redis,
        settings: Settings,
        process_id: str,
        connect: Callable[[], Redis],
    ) -> None:
        self.index = index
        self.keys: Keys = layout.keys(index)
        self.requests = Requests(redis, self.keys, settings)
        self.scripts = Scripts(redis, self.keys, settings, self.requests)
        self.asking = Asking(
            self.scripts,
            self.requests,
            settings,
            process_id,
            connect,
            new_id=lambda: layout.new_id(index),
        )
        self.answering = Answering(self.scripts, self.requests)
        self.registry = Registry(self.scripts, self.requests, self.answering, self.keys, settings)


class ShardedRequests(Requests):
    """The reader of requests, each read in the shard its id names."""

    def __init__(self, shards: Sequence[Shard], layout: Layout, redis: Redis, settings: Settings):
        super().__init__(redis, layout.deployment, settings)
        self._shards = shards
        self._layout = layout

    def of(self, request_id: str) -> Requests:
        return self._shards[self._layout.of_request(request_id)].requests

    def remember(self, info: RequestInfo) -> None:
        self.of(info.request.id).remember(info)

    def forget(self, request_id: str) -> None:
        self.of(request_id).forget(request_id)

    async def info(self, request_id: str, *, fresh: bool = False) -> RequestInfo:
        return await self.of(request_id).info(request_id, fresh=fresh)

    async def row(self, request_id: str, conn: Redis | None = None) -> RequestRow | None:
        return await self.of(request_id).row(request_id, conn)

    async def holds(self, request_id: str, group: str) -> bool:
        return await self.of(request_id).holds(request_id, group)

    async def settlement(self, request_id: str) -> Settlement | None:
        return await self.of(request_id).settlement(request_id)

    async def idempotent(self, digest: str) -> str | None:
        for shard in self._shards:
            found = await shard.requests.idempotent(digest)
            if found is not None:
                return found
        return None

    async def turn(self, turn_id: str) -> list[tuple[str, str | None, str | None]]:
        return await self._shards[self._layout.of_turn(turn_id)].requests.turn(turn_id)

    async def statuses(self, ids: Sequence[str], now_ms: int) -> list[RequestStatus]:
        """In the order given, each read in its own shard."""
        found: dict[str, RequestStatus] = {}
        for index, shard in enumerate(self._shards):
            mine = [i for i in ids if self._layout.of_request(i) == index]
            if mine:
                found.update((s.id, s) for s in await shard.requests.statuses(mine, now_ms))
        return [found[i] for i in ids if i in found]


class ShardedAnswering(Answering):
    """The group side, each step run in the shard of its request."""

    def __init__(self, shards: Sequence[Shard], layout: Layout, requests: Requests) -> None:
        super().__init__(shards[0].scripts, requests)
        self._shards = shards
        self._layout = layout

    def of(self, request_id: str) -> Answering:
        return self._shards[self._layout.of_request(request_id)].answering

    async def accept(self, offer: Offer) -> bool:
        return await self.of(offer.request_id).accept(offer)

    async def decline(self, request_id: str, group: str, tier: int, offer_id: str) -> Reply:
        return await self.of(request_id).decline(request_id, group, tier, offer_id)

    async def release(self, request_id: str, group: str) -> bool:
        return await self.of(request_id).release(request_id, group)

    async def answer(
        self, request_id: str, group: str, answers: Any, *, by: str, tier: int | None = None
    ) -> Answers:
        return await self.of(request_id).answer(request_id, group, answers, by=by, tier=tier)

    async def claim_and_answer(self, offer: Offer, answers: Any, *, by: str) -> Answers:
        return await self.of(offer.request_id).claim_and_answer(offer, answers, by=by)


class ShardedRegistry(Registry):
    """The registry of every shard: changes go to each shard's copy, reads come from
    shard 0's (every replica registers in every shard, so the copies agree)."""

    def __init__(self, shards: Sequence[Shard], settings: Settings) -> None:
        first = shards[0]
        super().__init__(first.scripts, first.requests, first.answering, first.keys, settings)
        self._shards = shards

    async def register(self, spec: GroupSpec, consumer: str, *, mode: str = "start") -> bool:
        again = False
        for shard in self._shards:
            again = await shard.registry.register(spec, consumer, mode=mode) or again
        return again

    async def leave(self, group: str, consumer: str) -> None:
        for shard in self._shards:
            await shard.registry.leave(group, consumer)

    async def take_over_dead(self, spec: GroupSpec, consumer: str) -> list[Entry]:
        raise NotImplementedError("a replica takes over in each shard (shard.registry)")

    async def trim(self, priority: int) -> int:
        return sum([await shard.registry.trim(priority) for shard in self._shards])

    async def statuses(self) -> list[GroupStatus]:
        """Shard 0's rows, with the entries pending summed over every shard."""
        rows = await self._shards[0].registry.statuses()
        for shard in self._shards[1:]:
            pending = {row.name: row.pending for row in await shard.registry.statuses()}
            for row in rows:
                row.pending += pending.get(row.name, 0)
        return rows

    async def give_back_all(self, group: str, tier: int, consumer: str, idle_ms: int) -> int:
        return sum(
            [
                await shard.registry.give_back_all(group, tier, consumer, idle_ms)
                for shard in self._shards
            ]
        )

    async def remove(self, group: str) -> int:
        return await self._in_every_shard(lambda r: r.remove(group))

    async def set_priority(self, group: str, priority: int) -> int:
        return await self._in_every_shard(lambda r: r.set_priority(group, priority))

    async def _in_every_shard(self, step: Callable[[Registry], Any]) -> int:
        """Shard 0 first (its refusals are the answer); a later shard that does not
        have the group (a step cut short before) is skipped."""
        moved = await step(self._shards[0].registry)
        for shard in self._shards[1:]:
            try:
                moved += await step(shard.registry)
            except AskError as exc:
                if exc.code is not ErrorCode.NOT_FOUND:
                    raise
        return int(moved)
