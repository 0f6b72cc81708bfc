"""The answerer groups in Redis: a replica registering (and re-registering with every
heartbeat) and leaving, taking over the entries of its group's dead replicas, the tier
streams kept bounded, the groups as status shows them, and an operator's `askq group
remove | prune`.

A group has one priority and one scope (lua/register.lua refuses a replica that
disagrees). Changing either is deliberate: stop the group's replicas, remove it, start
them with the new values. Removing gives back everything the group holds (claims
released, offers declined, so the waterfall moves on); the sweeper does the same for a
group with no live replica, after a grace period (`give_back_all`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..protocol._checks import check_group, duration_ms
from ..protocol._errors import AskError, ErrorCode
from ..protocol._replies import Reply
from ..protocol._settings import Settings
from ..protocol._text import visible
from ..redis._connections import redis_errors, server_ms
from ..redis._full import episode
from ..redis._keys import Keys
from ..redis._requests import Requests
from ..redis._scripts import Scripts
from ._answering import Answering
from ._registry_reads import RegistryReads

log = logging.getLogger("askq.registry")

PAGE = 100
ADMIN_CONSUMER = "askq-admin"

Entry = tuple[str, dict[str, str]]  # a tier stream's entry: id, fields


@dataclass(frozen=True)
class GroupSpec:
    """A group as a replica registers it."""

    name: str
    priority: int
    kind: str
    scope: dict[str, str] = field(default_factory=dict)
    timing: dict[str, int] = field(default_factory=dict)  # decision_window_ms, ...

    @property
    def identity(self) -> str:
        """What every replica of the group must agree on besides the priority."""
        return json.dumps({"scope": self.scope}, sort_keys=True, separators=(",", ":"))

    @property
    def info(self) -> str:
        match = lua_match(self.scope)
        return json.dumps(
            {
                "kind": self.kind,
                "scope": self.scope,
                "priority": self.priority,
                "identity": self.identity,
                **({"match": match} if match else {}),
                **self.timing,
            },
            sort_keys=True,
        )


# What a Lua pattern gives a special meaning; each is escaped with `%` to stand for itself.
_LUA_MAGIC = frozenset("^$()%.[]*+-?")


def lua_pattern(glob: str) -> str | None:
    """A scope selector's shell-style pattern (`scope_matches`: fnmatchcase) as an
    anchored Lua pattern that matches exactly the same strings, for routing inside the
    scripts (lua/common.lua, `route`); None for a pattern it cannot express so, which
    the group's replicas then decide on themselves: a `[...]` set, and `?` (one
    character to Python, one byte to Lua: they differ on UTF-8 beyond ASCII)."""
    if "[" in glob or "?" in glob:
        return None
    out = ["^"]
    for char in glob:
        if char == "*":
            out.append(".*")
        elif char in _LUA_MAGIC:
            out.append("%" + char)
        else:
            out.append(char)
    out.append("$")
    return "".join(out)


def lua_match(scope: dict[str, str]) -> dict[str, str] | None:
    """The group's selector as Lua patterns by scope key, routed on in the scripts: a
    request whose scope it cannot match is never offered to the group. None when the
    group selects everything, or has a pattern Lua cannot express (it is offered
    everything, as before, and declines by its selector)."""
    patterns = {key: lua_pattern(glob) for key, glob in scope.items()}
    if not patterns or any(p is None for p in patterns.values()):
        return None
    return {key: p for key, p in patterns.items() if p is not None}


def _selector(scope: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(scope.items())) or "*"


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Registry(RegistryReads):
    def __init__(
        self,
        scripts: Scripts,
        requests: Requests,
        answering: Answering,
        keys: Keys,
        settings: Settings,
    ) -> None:
        self.scripts = scripts
        self.requests = requests
        self.answering = answering
        self.redis: Redis = scripts.redis
        self.keys = keys
        self.settings = settings

    # --- a replica's life ----------------------------------------------------------------

    async def register(self, spec: GroupSpec, consumer: str, *, mode: str = "start") -> bool:
        """Register (start) or re-register (each heartbeat) a replica. True when
        something had to be written again (Redis lost it). A replica whose priority or
        scope disagrees with its group's is refused: CONFIG_ERROR, naming both."""
        reply = await self.scripts.register(
            spec.name,
            spec.priority,
            spec.info,
            spec.identity,
            consumer,
            _ttl_ms(self.settings),
            mode,
        )
        if reply.kind is Reply.CONFLICT:
            raise _conflict(spec, reply.value(0), reply.value(1))
        if reply.value(1, "0") == "1":  # let through although Redis is full (register.lua)
            episode.refused("heartbeat", f"heartbeat of group {spec.name}")
        elif mode == "beat":
            episode.wrote()
        if mode == "start" or reply.value(0) == "1":
            await self.scripts.tier_streams(refresh=True)
        return reply.value(0) == "1"

    async def leave(self, group: str, consumer: str) -> None:
        """The replica stops being live; the group stays live while another one beats."""
        await self.scripts.leave(group, consumer)

    async def take_over_dead(self, spec: GroupSpec, consumer: str) -> list[Entry]:
        """Claim for `consumer` the entries pending on replicas of its group that stopped
        beating, and forget those replicas (restarts under new names must not pile up).
        Returns the entries, to present again or decide."""
        k, redis = self.keys, self.redis
        stream, group = k.tier(spec.priority), spec.name
        with redis_errors(self.settings):
            now = await server_ms(redis)
            live = set(await redis.zrangebyscore(k.consumers(group), now, "+inf"))
            try:
                consumers = await redis.xinfo_consumers(stream, group)
            except ResponseError:  # the group's stream is gone; registering recreates it
                return []
            taken: list[Entry] = []
            for replica in consumers:
                name = replica["name"]
                if name == consumer or name in live:
                    continue
                if replica["pending"]:
                    taken += await self._claim_all(stream, group, name, consumer)
                await redis.xgroup_delconsumer(stream, group, name)
            await redis.zremrangebyscore(k.consumers(group), "-inf", now)
        return taken

    async def _claim_all(self, stream: str, group: str, dead: str, consumer: str) -> list[Entry]:
        redis, taken = self.redis, list[Entry]()
        while True:
            pending = await redis.xpending_range(stream, group, "-", "+", PAGE, consumername=dead)
            if not pending:
                return taken
            ids = [e["message_id"] for e in pending]
            claimed = await redis.xclaim(stream, group, consumer, 0, ids)
            log.info("%s took over %d offers of %s", consumer, len(claimed), dead)
            for entry_id, fields in claimed:
                if fields is None:  # trimmed away; nothing to recover
                    await redis.xack(stream, group, entry_id)
                else:
                    taken.append((entry_id, fields))
            if len(pending) < PAGE:
                return taken

    async def trim(self, priority: int) -> int:
        """Drop the tier's entries every group is done with, so the stream stays
        bounded; returns how many were dropped.

        Kept: every entry still pending in some group (a claim may be held for hours;
        recovery needs its entry) and every entry a live group has not read yet. A group
        that is gone does not hold the stream back: offers made while it was gone were
        never its to decide."""
        redis, stream = self.redis, self.keys.tier(priority)
        with redis_errors(self.settings):
            now = await server_ms(redis)
            floor: tuple[int, int] | None = None
            try:
                for info in await redis.xinfo_groups(stream):
                    name = info["name"]
                    candidates = []
                    if info["pending"]:
                        candidates.append((await redis.xpending(stream, name))["min"])
                    live_until = await redis.zscore(self.keys.live, name)
                    if live_until is not None and live_until > now:
                        candidates.append(info["last-delivered-id"])
                    for entry_id in filter(None, candidates):  # None: acknowledged meanwhile
                        floor = min(floor or _stream_id(entry_id), _stream_id(entry_id))
            except ResponseError:  # no such stream, or a group removed meanwhile: next round
                return 0
            if floor is None:
                return 0
            trimmed = await redis.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False)
        return int(trimmed)

    # --- giving back what a group cannot act on ------------------------------------------

    async def give_back(self, group: str, tier: int, entry_id: str, request_id: str) -> int:
        """The group can no longer act on offer entry `entry_id` of `request_id`:
        release its claim, or decline for it; acknowledge an entry that is no longer
        anyone's. Returns 1 when the request moved on."""
        row = await self.requests.row(request_id) if request_id else None
        try:
            if row is not None and row.offer == entry_id and group in row.claimers:
                log.warning("releasing %s: group %s cannot answer it", request_id, group)
                return int(await self.answering.release(request_id, group))
            if row is not None and row.offer == entry_id and group in row.undecided:
                log.warning("declining %s for %s: the group cannot decide it", request_id, group)
                await self.answering.decline(request_id, group, tier, entry_id)
                return 1
        except AskError as exc:
            if exc.code == ErrorCode.REDIS_UNAVAILABLE:
                raise
        with redis_errors(self.settings):
            await self.redis.xack(self.keys.tier(tier), group, entry_id)  # nobody's now
        return 0

    async def give_back_all(self, group: str, tier: int, consumer: str, idle_ms: int) -> int:
        """Give back every entry the group holds that has waited `idle_ms`: those pending
        on its (gone) replicas, and those offered to it that no replica ever read.
        Returns how many requests moved on."""
        redis, stream = self.redis, self.keys.tier(tier)
        moved, cursor = 0, "0-0"
        with redis_errors(self.settings):
            now = await server_ms(redis)
            try:
                while True:  # delivered to a replica, never acknowledged
                    reply = await redis.xautoclaim(
                        stream, group, consumer, idle_ms, cursor, count=PAGE
                    )
                    cursor, entries = reply[0], reply[1]
                    for entry_id, fields in entries:
                        moved += await self.give_back(group, tier, entry_id, _request(fields))
                    if cursor == "0-0":
                        break
                # Offered while no replica was reading: never delivered, so in no
                # replica's pending list; older than `idle_ms` by its id (ms).
                last = next(
                    (
                        g["last-delivered-id"]
                        for g in await redis.xinfo_groups(stream)
                        if g["name"] == group
                    ),
                    None,
                )
                while last is not None:
                    entries = await redis.xrange(stream, f"({last}", now - idle_ms, count=PAGE)
                    for entry_id, fields in entries:
                        moved += await self.give_back(group, tier, entry_id, _request(fields))
                    last = entries[-1][0] if len(entries) == PAGE else None
            except ResponseError:  # no such stream or group
                return moved
            finally:
                with contextlib.suppress(ResponseError):
                    await redis.xgroup_delconsumer(stream, group, consumer)
        return moved

    async def remove(self, group: str) -> int:
        """Give back what the group holds and forget it. Refused (CONFIG_ERROR) while a
        replica of it is live: that replica would register it again at once. Returns
        how many requests moved on."""
        check_group(group)
        priority = (await self.priorities()).get(group)
        if priority is None:
            raise AskError(ErrorCode.NOT_FOUND, f"no group {group!r} is registered")
        live = await self.live_replicas(group)
        if live:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"group {group} has {len(live)} live replica(s) ({', '.join(live)}):"
                " stop them first, then remove it",
            )
        moved = await self.give_back_all(group, priority, ADMIN_CONSUMER, 0)
        reply = await self.scripts.remove_group(group, priority)
        if reply.kind is Reply.LIVE:
            raise AskError(
                ErrorCode.CONFIG_ERROR, f"group {group} has a live replica again: stop it first"
            )
        await self.scripts.tier_streams(refresh=True)
        return moved

    async def set_priority(self, group: str, priority: int) -> int:
        """Move a group with no live replica to `priority` (lua/set_priority.lua says
        why a live one is refused): what it held on its old tier is given back first
        (the waterfall moves on, as for `remove`), then the registry and its consumer
        group move in one step. Returns how many requests moved on."""
        check_group(group)
        old = (await self.priorities()).get(group)
        if old is None:
            raise AskError(ErrorCode.NOT_FOUND, f"no group {group!r} is registered")
        live = await self.live_replicas(group)
        if live:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"group {group} has {len(live)} live replica(s) ({', '.join(live)}): a group"
                " has one priority, which its running replicas hold; stop them first, then"
                f" set its priority and start them with --priority {priority}",
            )
        if old == priority:
            return 0
        moved = await self.give_back_all(group, old, ADMIN_CONSUMER, 0)
        reply = await self.scripts.set_priority(group, old, priority)
        if reply.kind is Reply.LIVE:
            raise AskError(
                ErrorCode.CONFIG_ERROR, f"group {group} has a live replica again: stop it first"
            )
        if reply.kind is Reply.NOT_FOUND:
            raise AskError(ErrorCode.NOT_FOUND, f"group {group!r} was removed meanwhile")
        await self.scripts.tier_streams(refresh=True)
        return moved

    async def prune(self) -> list[str]:
        """Remove every group with no live replica; returns their names."""
        removed = []
        for name in sorted(await self.priorities()):
            if await self.live_replicas(name):
                continue
            with contextlib.suppress(AskError):  # came back, or removed meanwhile
                await self.remove(name)
                removed.append(name)
        return removed


def _request(fields: Any) -> str:
    return str((fields or {}).get("request", ""))


def _ttl_ms(settings: Settings) -> int:
    return duration_ms(settings.consumer_ttl, "consumer_ttl")


def _conflict(spec: GroupSpec, priority: str, info: str) -> AskError:
    try:
        known = json.loads(info) if info else {}
    except ValueError:
        known = {}
    return AskError(
        ErrorCode.CONFIG_ERROR,
        f"group {spec.name} is registered with priority {priority}, scope"
        f" {visible(_selector(known.get('scope') or {}))}; this replica has priority"
        f" {spec.priority}, scope {visible(_selector(spec.scope))}. A group has one"
        f" priority and one scope: start it with those, use another --group, or stop the"
        f" group's replicas and `askq group remove {spec.name}` to register it anew",
    )
