"""The one runner of the Lua scripts, and the only place their key lists are built
(bullmq's `Scripts`): a method per script, each naming the keys and arguments its
script declares (`_lua.py`), sent in the declared order and nothing more.

By role, over the machinery of `_script_runner.ScriptRunner`: the caller's
transitions (`CallerScripts`) and a group's, with the registry's (`GroupScripts`);
`Scripts` is both, the one object the roles of the seam share.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..protocol._checks import duration_ms
from ..protocol._errors import AskError, ErrorCode
from ..protocol._messages import TAKEN_OVER
from ..protocol._replies import Reply, ScriptReply
from ._connections import redis_errors
from ._script_runner import NAMES, AskSend, Listed, RequestFacts, ScriptRunner

__all__ = ["NAMES", "AskSend", "RequestFacts", "Scripts"]


class CallerScripts(ScriptRunner):
    """The caller's transitions: ask, cancel, fire a timer, abort a turn, forget or
    reap a caller process."""

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

        async def listed() -> list[Listed]:
            return [
                (request_id, inbox or k.inbox(""), None, idem)
                for request_id, inbox, idem in await self.requests.turn(turn_id)
            ]

        return await self._run_listed(
            "abort_turn",
            listed,
            {"aborted": k.aborted(turn_id), "turn": k.turn(turn_id)},
            {"settlement": settlement, "by": by},
            f"turn {turn_id!r} kept changing while aborting",
        )

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

        async def listed() -> list[Listed]:
            return [
                (request_id, inbox or k.inbox(process), turn or "", idem)
                for request_id, inbox, turn, idem in await self.requests.asked(process)
            ]

        return await self._run_listed(
            "reap_caller",
            listed,
            {"alive": k.alive(process), "asked": k.asked(process)},
            {
                "process": process,
                "code": code,
                "settlement": settlement,
                "by": by,
                "reason": reason,
            },
            f"caller {process!r} kept changing while reaping it",
        )


class GroupScripts(ScriptRunner):
    """A group's transitions (accept, decline, release, answer, claim and answer) and
    the registry's (register, leave, remove a group, move it to another tier)."""

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


class Scripts(CallerScripts, GroupScripts):
    """Every script call, for the seam's roles (`Asking`, `Answering`, `Registry`)."""
