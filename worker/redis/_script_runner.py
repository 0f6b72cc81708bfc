"""The runner under every Lua script call (bullmq's `Scripts`, `_scripts.py` being its
calls): the scripts (registered once per client; redis-py's Script runs EVALSHA and
loads the text on NOSCRIPT), the auto-pipeline (`_pipeline.py`), the view of the tiers
(the streams a script that moves a request on must be given), the key and argument
lists in each script's declared order (`_lua.py`), the STALE retry (the view or a
request's facts were out of date: read them again, run again) and the translation of
a lost Redis into REDIS_UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from ..protocol._errors import AskError, ErrorCode
from ..protocol._replies import Reply, ScriptReply
from ..protocol._settings import Settings
from ._connections import redis_errors, server_ms
from ._keys import Keys
from ._lua import Script, load
from ._pipeline import ScriptPipeline
from ._requests import Requests

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
# One request a script that settles many lists: id, inbox, turn (None: abort_turn),
# idempotency index key.
Listed = tuple[str, str, str | None, str | None]

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


class ScriptRunner:
    """The machinery every script call goes through; the calls themselves, a method per
    script, are `_scripts.Scripts`'s roles."""

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

    async def _run_listed(
        self,
        name: str,
        listed: Callable[[], Awaitable[list[Listed]]],
        keys: Mapping[str, str],
        args: Mapping[str, Any],
        changing: str,
    ) -> ScriptReply:
        """Run a script that settles many requests at once (abort_turn, reap_caller):
        each request's keys listed after the script's own (`listed_keys`), its ids as
        the last arguments. Until the reply is not STALE: then the tiers and the
        requests are read again; INTERNAL (`changing`) if they keep changing."""
        for attempt in range(8):
            tiers = await self.tier_streams(refresh=attempt > 0)
            requests = await listed()
            more = [key for request in requests for key in self.listed_keys(*request)]
            reply = ScriptReply.of(
                await self.call(
                    name,
                    keys,
                    {**args, "n_tiers": len(tiers)},
                    more_keys=more,
                    more_args=[request[0] for request in requests],
                )
            )
            if reply.kind is not Reply.STALE:
                return reply
        raise AskError(ErrorCode.INTERNAL, changing)

    def listed_keys(
        self, request_id: str, inbox: str, turn: str | None, idem: str | None
    ) -> list[str]:
        """One request's keys as a script that settles many lists them, eight each
        (lua/abort_turn.lua, lua/reap_caller.lua): the fourth is the caller's set of
        asks (abort_turn: `turn` None) or the request's turn (reap_caller). `idem` is
        the index key as the request's row holds it."""
        k = self.keys
        fourth = k.asked(k.process_of(inbox)) if turn is None else k.turn(turn)
        return [
            k.request(request_id),
            k.reply(request_id),
            inbox,
            fourth,
            k.payload(request_id),
            k.timeout_body(request_id),
            idem or k.idem(None),
            k.audit(request_id),
        ]
