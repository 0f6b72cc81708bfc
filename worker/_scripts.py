"""The one runner of the Lua scripts, and the only place their key lists are built
(bullmq's `Scripts`): a method per script, each naming the keys and arguments its
script declares (`_lua.py`), sent in the declared order and nothing more.

It owns the scripts (registered once per client; redis-py's Script runs EVALSHA and
loads the text on NOSCRIPT), the auto-pipeline (`_pipeline.py`), the view of the tiers
(the streams a script that moves a request on must be given), the STALE retry (the view
or a request's facts were out of date: read them again, run again) and the translation
of a lost Redis into REDIS_UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from ._checks import duration_ms
from ._connections import redis_errors, server_ms
from ._errors import AskError, ErrorCode
from ._keys import Keys
from ._lua import Script, load
from ._messages import TAKEN_OVER
from ._pipeline import ScriptPipeline
from ._replies import Reply, ScriptReply
from ._requests import Requests
from ._settings import Settings

STALE_RETRIES = 5

# Every script the runner runs (each a lua/<name>.lua; a test checks there is no other).
NAMES = (
    "ask",
    "accept",
    "decline",
    "release",
    "answer",
    "claim_answer",
    "cancel",
    "fire",
    "abort_turn",
    "forget_caller",
    "reap_caller",
    "register",
    "leave",
    "remove_group",
    "set_priority",
)

# Keys by name -> the value of each; fresh: read what may have changed (after STALE).
KeySource = Callable[[bool], Awaitable[Mapping[str, str]]]


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What a request's keys are made of, as its caller knows them (no read needed)."""

    inbox: str
    turn_id: str
    idempotency: str | None  # the digest of its idempotency key


@dataclass(frozen=True, slots=True)
class AskSend:
    """One send of ask.lua (lua/ask.lua's header says what each is)."""

    turn_id: str
    agent_id: str
    claimed_owner: str  # the owner the caller claims ('' for none)
    idempotency: str | None  # the digest of its idempotency key
    request_id: str  # its id, or the id of the request the idempotency index named
    payload_json: str
    inbox: str
    owner: str  # the owner whose agent key is declared ('' for none)
    timeout_ms: int
    timeout_settlement: str
    fingerprint: str  # '' when the ask is not idempotent
    mode: str  # 'new' | 'attach'
    resent: bool
    gone: str
    caller_ttl_ms: int
    process: str


def _script_of(name: str) -> Script:
    assert name in NAMES, f"{name}: not a script of the runner's"
    return load(name)


class Scripts:
    def __init__(self, redis: Redis, keys: Keys, settings: Settings, requests: Requests) -> None:
        self.redis = redis
        self.keys = keys
        self.settings = settings
        self.requests = requests
        self.pipeline = ScriptPipeline(redis)
        self._registered: dict[str, AsyncScript] = {}
        self._tiers: list[str] | None = None
        self._registry_seen = ""  # the registry's marker as last read with the tiers
        self._reading_tiers: asyncio.Future[list[str]] | None = None
        k = keys
        self._deployment = {
            "pending": k.pending,
            "events": k.events,
            "groups": k.groups,
            "live": k.live,
            "group_info": k.group_info,
            "timers": k.timers,
            "wake": k.wake,
            "callers": k.callers,
            "audit_log": k.audit_log,
            "recent": k.recent,
            "trends": k.trends,
            "registry": k.registry,
        }
        self._common: dict[str, Any] = {
            "tier_prefix": k.tier_prefix,
            "settled_ttl": settings.settled_ttl,
            "events_maxlen": settings.events_maxlen,
            "abort_ttl": settings.abort_ttl,
            "audit_maxlen": settings.audit_stream_maxlen,
            "recent_max": settings.recent_max,
        }

    # --- the machinery ----------------------------------------------------------------

    async def tier_streams(self, refresh: bool = False) -> list[str]:
        """The stream keys of every tier in the registry (a script that may move a
        request to another tier must be given them). One read at a time: a burst of
        asks with nothing cached shares it."""
        if self._tiers is not None and not refresh:
            return self._tiers
        if self._reading_tiers is None or self._reading_tiers.done():
            self._reading_tiers = asyncio.ensure_future(self._read_tiers())
        return await asyncio.shield(self._reading_tiers)

    async def _read_tiers(self) -> list[str]:
        """The tiers, and the registry's marker they are in (written if there is none
        yet: an ask can then tell that registry lost from one with no group)."""
        k = self.keys
        with redis_errors(self.settings):
            priorities = {int(p) for p in await self.redis.hvals(k.groups)}  # type: ignore[misc]
            marker = await self.redis.get(k.registry)
            if marker is None:
                mine = f"{await server_ms(self.redis)}:{uuid.uuid4().hex}"
                await self.redis.set(k.registry, mine, nx=True)
                marker = await self.redis.get(k.registry)
        self._registry_seen = marker or ""
        self._tiers = [self.keys.tier(p) for p in sorted(priorities)]
        return self._tiers

    def _script(self, name: str) -> AsyncScript:
        script = self._registered.get(name)
        if script is None:
            script = self._registered[name] = self.redis.register_script(load(name).text)
        return script

    async def call(
        self,
        name: str,
        keys: Mapping[str, str],
        args: Mapping[str, Any],
        *,
        more_keys: Sequence[str] = (),
        more_args: Sequence[Any] = (),
    ) -> Any:
        """Run script `name` once: the keys and arguments it declares, by name (the
        deployment's keys and the common arguments need not be given), then the tier
        streams if it takes them, then `more_*` (a layout of its own: abort_turn)."""
        script = _script_of(name)
        tiers = await self.tier_streams() if script.tiers else []
        arg_list = self._arg_list(script, args, more_args)
        key_list = self._key_list(script, keys, tiers, more_keys)
        del keys, args  # (a burst of calls waits below: each holds only its two lists)
        return await self._send(name, key_list, arg_list)

    async def _send(self, name: str, key_list: list[str], arg_list: list[Any]) -> Any:
        with redis_errors(self.settings):
            return await self.pipeline.call(self._script(name), key_list, arg_list)

    def _key_list(
        self,
        script: Script,
        keys: Mapping[str, str],
        tiers: Sequence[str],
        more: Sequence[str] = (),
    ) -> list[str]:
        deployment = self._deployment
        found = [keys[key] if key in keys else deployment[key] for key in script.keys]
        return [*found, *tiers, *more]

    def _arg_list(
        self, script: Script, args: Mapping[str, Any], more: Sequence[Any] = ()
    ) -> list[Any]:
        common = self._common
        return [args[arg] if arg in args else common[arg] for arg in script.args] + list(more)

    async def _run(self, name: str, keys: KeySource, args: Mapping[str, Any]) -> ScriptReply:
        """Run until the reply is not STALE: then the tiers and the keys are read again."""
        script = _script_of(name)
        arg_list = self._arg_list(script, args)
        del args
        for attempt in range(STALE_RETRIES):
            fresh = attempt > 0
            tiers = await self.tier_streams(refresh=fresh) if script.tiers else []
            key_list = self._key_list(script, await keys(fresh), tiers)
            reply = ScriptReply.of(await self._send(name, key_list, arg_list))
            if reply.kind is not Reply.STALE:
                return reply
        raise AskError(ErrorCode.INTERNAL, "the answerer registry kept changing; try again")

    def request_keys(
        self, request_id: str, inbox: str, turn: str, idem: str | None
    ) -> dict[str, str]:
        """Every per-request key by name (a script takes those it declares)."""
        k = self.keys
        process = k.process_of(inbox)
        return {
            "req": k.request(request_id),
            "reply": k.reply(request_id),
            "payload": k.payload(request_id),
            "timeout_body": k.timeout_body(request_id),
            "idem": k.idem(idem),
            "inbox": inbox,
            "asked": k.asked(process),
            "alive": k.alive(process),
            "turn": k.turn(turn),
            "aborted": k.aborted(turn),
            "audit": k.audit(request_id),
        }

    def _of_request(
        self, request_id: str, facts: RequestFacts | None = None, **more: str
    ) -> KeySource:
        """The keys of a request already asked, from its facts: `facts` when its caller
        gives them, else cached or read (read again on STALE: its caller may have moved)."""

        async def keys(fresh: bool) -> Mapping[str, str]:
            if facts is not None and not fresh:
                found = self.request_keys(request_id, facts.inbox, facts.turn_id, facts.idempotency)
                return {**found, **more}
            info = await self.requests.info(request_id, fresh=fresh)
            request = info.request
            found = self.request_keys(
                request_id, info.inbox, request.caller.turn_id, request.idempotency
            )
            return {**found, **more}

        return keys

    # --- the caller's transitions ------------------------------------------------------

    async def ask(self, send: AskSend) -> ScriptReply:
        k = self.keys
        prev_inbox = send.inbox

        async def keys(fresh: bool) -> Mapping[str, str]:
            nonlocal prev_inbox
            if fresh and send.fingerprint:  # an idempotent ask: where it replies now
                row = await self.requests.row(send.request_id)
                prev_inbox = (row.inbox if row else None) or send.inbox
            found = self.request_keys(send.request_id, send.inbox, send.turn_id, send.idempotency)
            return {
                **found,
                "prev_inbox": prev_inbox,
                "prev_asked": k.asked(k.process_of(prev_inbox)),
                "owner": k.agent(send.owner),
                "agent": k.agent(send.agent_id),
            }

        return await self._run(
            "ask",
            keys,
            {
                "request_id": send.request_id,
                "payload_json": send.payload_json,
                "turn_id": send.turn_id,
                "agent_id": send.agent_id,
                "claimed_owner": send.claimed_owner,
                "process": send.process,
                "caller_ttl_ms": send.caller_ttl_ms,
                "timeout_ms": send.timeout_ms,
                "timeout_settlement": send.timeout_settlement,
                "fingerprint": send.fingerprint,
                "taken_over": TAKEN_OVER,
                "mode": send.mode,
                "resent": "1" if send.resent else "0",
                "gone": send.gone,
                "agent_prefix": k.agent(""),
                "registry_seen": self._registry_seen,
                # A lost registry's groups register again within a heartbeat (a third
                # of their TTL) and a beat may wait out a TTL: wait that long for them.
                "registry_wait_ms": duration_ms(self.settings.consumer_ttl * 4 / 3, "ttl"),
            },
        )

    async def cancel(
        self,
        request_id: str,
        code: str,
        settlement: str,
        by: str,
        reason: str,
        facts: RequestFacts | None = None,
    ) -> ScriptReply:
        args = {
            "request_id": request_id,
            "code": code,
            "settlement": settlement,
            "by": by,
            "reason": reason,
        }
        return await self._run("cancel", self._of_request(request_id, facts), args)

    async def fire(self, timer: str, facts: RequestFacts | None = None) -> ScriptReply:
        """Fire a due timer (`timeout|<id>`, `window|<id>|<offer>|<group>`, ...). The
        timer of a request that is gone (expired) is dropped: nothing is left to do."""
        request_id = timer.split("|")[1]
        try:
            return await self._run(
                "fire",
                self._of_request(request_id, facts),
                {"request_id": request_id, "timer": timer},
            )
        except AskError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:
                raise
            with redis_errors(self.settings):
                await self.redis.zrem(self.keys.timers, timer)
            return ScriptReply(Reply.MOOT)

    async def abort_turn(self, turn_id: str, settlement: str, by: str) -> ScriptReply:
        """The turn's mark, then each of its unsettled requests cancelled: every key of
        every one declared (lua/abort_turn.lua)."""
        k = self.keys
        for attempt in range(8):
            tiers = await self.tier_streams(refresh=attempt > 0)
            requests = await self.requests.turn(turn_id)
            more: list[str] = []
            for request_id, inbox, idem in requests:
                inbox = inbox or k.inbox("")
                more += [
                    k.request(request_id),
                    k.reply(request_id),
                    inbox,
                    k.asked(k.process_of(inbox)),
                    k.payload(request_id),
                    k.timeout_body(request_id),
                    idem or k.idem(None),
                    k.audit(request_id),
                ]
            reply = ScriptReply.of(
                await self.call(
                    "abort_turn",
                    {"aborted": k.aborted(turn_id), "turn": k.turn(turn_id)},
                    {"settlement": settlement, "by": by, "n_tiers": len(tiers)},
                    more_keys=more,
                    more_args=[request_id for request_id, _, _ in requests],
                )
            )
            if reply.kind is not Reply.STALE:
                return reply
        raise AskError(ErrorCode.INTERNAL, f"turn {turn_id!r} kept changing while aborting")

    async def forget_caller(self, process: str) -> bool:
        k = self.keys
        forgotten = await self.call(
            "forget_caller",
            {"alive": k.alive(process), "asked": k.asked(process)},
            {"process": process},
        )
        return bool(forgotten)

    async def reap_caller(
        self, process: str, code: str, settlement: str, by: str, reason: str
    ) -> ScriptReply:
        """A caller process found not live: if it still is not, its pending asks
        cancelled and the process forgotten, in one step (lua/reap_caller.lua); LIVE
        when it is live again (it asked meanwhile)."""
        k = self.keys
        for attempt in range(8):
            tiers = await self.tier_streams(refresh=attempt > 0)
            more: list[str] = []
            asked = await self.requests.asked(process)
            for request_id, inbox, turn, idem in asked:
                inbox = inbox or k.inbox(process)
                more += [
                    k.request(request_id),
                    k.reply(request_id),
                    inbox,
                    k.turn(turn or ""),
                    k.payload(request_id),
                    k.timeout_body(request_id),
                    idem or k.idem(None),
                    k.audit(request_id),
                ]
            reply = ScriptReply.of(
                await self.call(
                    "reap_caller",
                    {"alive": k.alive(process), "asked": k.asked(process)},
                    {
                        "process": process,
                        "code": code,
                        "settlement": settlement,
                        "by": by,
                        "reason": reason,
                        "n_tiers": len(tiers),
                    },
                    more_keys=more,
                    more_args=[request_id for request_id, _, _, _ in asked],
                )
            )
            if reply.kind is not Reply.STALE:
                return reply
        raise AskError(ErrorCode.INTERNAL, f"caller {process!r} kept changing while reaping it")

    # --- a group's transitions ----------------------------------------------------------

    async def accept(self, request_id: str, group: str, tier: int, offer: str) -> ScriptReply:
        keys = self._of_request(request_id, tier=self.keys.tier(tier))
        return await self._run(
            "accept", keys, {"request_id": request_id, "group": group, "tier": tier, "offer": offer}
        )

    async def decline(self, request_id: str, group: str, tier: int, offer: str) -> ScriptReply:
        return await self._run(
            "decline",
            self._of_request(request_id),
            {"request_id": request_id, "group": group, "tier": tier, "offer": offer},
        )

    async def release(self, request_id: str, group: str) -> ScriptReply:
        return await self._run(
            "release", self._of_request(request_id), {"request_id": request_id, "group": group}
        )

    async def answer(
        self,
        request_id: str,
        group: str,
        settlement: str,
        by: str,
        tier: int | None,
        *,
        resent: bool = False,
    ) -> ScriptReply:
        """The group answers on its claim, which it holds at its own tier: `tier` when
        the caller knows it (a group does), else the request's, read (once more after
        STALE: the request moved on meanwhile)."""
        request_keys = self._of_request(request_id)

        async def keys(fresh: bool) -> Mapping[str, str]:
            nonlocal tier
            if tier is None or fresh:
                row = await self.requests.row(request_id)
                tier = row.tier if row is not None and row.tier is not None else tier
            found = await request_keys(fresh)
            return {**found, "tier": self.keys.tier(tier if tier is not None else 0)}

        return await self._run(
            "answer",
            keys,
            {
                "request_id": request_id,
                "group": group,
                "settlement": settlement,
                "by": by,
                "resent": "1" if resent else "0",
            },
        )

    async def claim_answer(
        self,
        request_id: str,
        group: str,
        tier: int,
        offer: str,
        settlement: str,
        by: str,
        *,
        resent: bool = False,
    ) -> ScriptReply:
        keys = self._of_request(request_id, tier=self.keys.tier(tier))
        return await self._run(
            "claim_answer",
            keys,
            {
                "request_id": request_id,
                "group": group,
                "tier": tier,
                "offer": offer,
                "settlement": settlement,
                "by": by,
                "resent": "1" if resent else "0",
            },
        )

    # --- the registry -------------------------------------------------------------------

    def _group_keys(self, group: str, priority: int) -> dict[str, str]:
        k = self.keys
        return {
            "consumers": k.consumers(group),
            "stream": k.tier(priority),
            "beats": k.beats(group),
        }

    async def register(
        self,
        group: str,
        priority: int,
        info: str,
        identity: str,
        consumer: str,
        ttl_ms: int,
        mode: str,
    ) -> ScriptReply:
        args = {
            "group": group,
            "priority": str(priority),
            "info": info,
            "identity": identity,
            "consumer": consumer,
            "ttl_ms": ttl_ms,
            "mode": mode,
        }
        return ScriptReply.of(await self.call("register", self._group_keys(group, priority), args))

    async def leave(self, group: str, consumer: str) -> None:
        keys = {"consumers": self.keys.consumers(group), "beats": self.keys.beats(group)}
        await self.call("leave", keys, {"group": group, "consumer": consumer})

    async def remove_group(self, group: str, priority: int) -> ScriptReply:
        return ScriptReply.of(
            await self.call("remove_group", self._group_keys(group, priority), {"group": group})
        )

    async def set_priority(self, group: str, old: int, new: int) -> ScriptReply:
        k = self.keys
        keys = {
            "consumers": k.consumers(group),
            "old_stream": k.tier(old),
            "new_stream": k.tier(new),
        }
        return ScriptReply.of(
            await self.call("set_priority", keys, {"group": group, "priority": str(new)})
        )
