"""A live group is never missed by routing: NO_ANSWERER tells the model nobody can
answer, the one answer askq promises never to give while a group is live.

- A heartbeat held past the group's TTL (its process or Redis stalled, a failover):
  the group may be live and unable to beat, so a request with no live group to go to is
  offered to it, with a deadline at the end of its grace (an `overdue` timer); a group
  that is really gone counts as declining then.
- A registry Redis lost (a restart without persistence, a failover to a replica that
  lacked the keys, a FLUSHDB): its groups register again within a heartbeat, and an ask
  meanwhile waits for them (WAIT) instead of failing; an ask to a deployment that never
  had a group fails at once, as before.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from conftest import SEED, YES, YES_JSON, Backend, running, sweeping

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.redis._connections import server_ms
from askq.seam._registry import GroupSpec
from askq.sweeping._sweeper import Sweeper

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)


def caller(turn: str = "t1") -> Caller:
    return Caller(agent_id="agent", turn_id=turn)


async def until(check: Callable[[], Awaitable[Any]], what: str, within: float = 10) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what}: not within {within} s")


def hold_beats(seam: Seam, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Every replica's heartbeat (its registration again) waits until the event is set:
    a process or a server stalled for its beats, the rest of it running."""
    held = asyncio.Event()
    for shard in seam.shards:
        real = shard.registry.register

        async def register(spec: Any, consumer: str, *, mode: str = "start", _r: Any = real) -> Any:
            if mode == "beat":
                await held.wait()
            return await _r(spec, consumer, mode=mode)

        monkeypatch.setattr(shard.registry, "register", register)
    return held


async def lapsed(seam: Seam, group: str) -> bool:
    """The group's liveness ran out in every shard (its score is not after now)."""
    for shard in seam.shards:
        score = await seam.redis.zscore(shard.keys.live, group)
        if score is not None and score > await server_ms(seam.redis):
            return False
    return True


async def trail(seam: Seam, request_id: str) -> list[dict[str, Any]]:
    keys = seam.shard_of_request(request_id).keys
    return [json.loads(e) for e in await seam.redis.lrange(keys.audit(request_id), 0, -1)]  # type: ignore[misc]


def count_asks(seam: Seam, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The replies of every ask.lua run, in order."""
    replies: list[str] = []
    for shard in seam.shards:
        real = shard.scripts._send

        async def send(name: str, *args: Any, _r: Any = real) -> Any:
            reply = await _r(name, *args)
            if name == "ask":
                replies.append(str(reply[0]))
            return reply

        monkeypatch.setattr(shard.scripts, "_send", send)
    return replies


async def register_ghost(seam: Seam, spec: GroupSpec, live_ms: int) -> None:
    """What a replica's start-up writes, live for `live_ms`, and then nothing (killed:
    it never beats nor leaves)."""
    for shard in seam.shards:
        await shard.scripts.register(
            spec.name, spec.priority, spec.info, spec.identity, "killed", live_ms, "start"
        )
        await shard.scripts.tier_streams(refresh=True)


# --- a heartbeat overdue ------------------------------------------------------------------


async def test_a_group_whose_heartbeat_is_held_past_its_ttl_is_still_asked(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spurious NO_ANSWERER under load (test_answer_before_timeout_wins[real], once
    in a full run on a loaded machine): a group's liveness is the time of its last
    beat plus its TTL, on the server's clock, and a process (or a server) stalled longer
    than that holds the beat while the clock runs on. The ask that comes right after saw
    no live group and failed NO_ANSWERER while the group was running. Reproduced by
    holding the group's beats until its liveness has run out: it is offered the question
    (the trail says its heartbeat was overdue) and answers it. (TTL 1.5 s: the ask comes
    within its grace, another TTL, on a loaded machine too.)"""
    async with backend.seam(consumer_ttl=1.5) as seam:
        held = hold_beats(seam, monkeypatch)
        async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "rules"):
            await until(lambda: lapsed(seam, "rules"), "the group's liveness ran out")
            ids: list[str] = []
            answers = await asyncio.wait_for(seam.ask(SEED, caller(), on_published=ids.append), 10)
            assert answers.to_json() == YES_JSON
            offered = [e for e in await trail(seam, ids[0]) if e["e"] == "offered"]
            assert offered == [{**offered[0], "groups": "rules", "overdue": True}]
            held.set()  # the beats land again: the group is live, offered as ever
            await until(lambda: _not(lapsed(seam, "rules")), "a beat landed")
            ids.clear()
            again = await seam.ask(SEED, caller("t2"), on_published=ids.append)
            assert again.to_json() == YES_JSON
            offered = [e for e in await trail(seam, ids[0]) if e["e"] == "offered"]
            assert "overdue" not in offered[0]


async def test_an_ask_right_after_the_event_loop_stalled_past_the_ttl_is_answered(
    backend: Backend,
) -> None:
    """The same, as a loaded machine makes it: the process's event loop is stalled
    (here: blocked outright) for longer than the group's TTL right after its group
    started, and the ask made the moment it runs again reaches Redis before the
    group's beat does (it was queued first)."""
    async with backend.seam(consumer_ttl=1.5) as seam:
        async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "rules"):
            time.sleep(1.8)  # noqa: ASYNC251 - the stall itself: no beat can run
            answers = await asyncio.wait_for(seam.ask(SEED, caller()), 10)
    assert answers.to_json() == YES_JSON


async def _not(check: Awaitable[bool]) -> bool:
    return not await check


async def test_a_group_gone_for_good_is_waited_for_only_until_its_grace_ends(
    backend: Backend,
) -> None:
    """A replica killed (it never left): for its TTL past its last liveness it may be
    a stalled one, so a question with nowhere else to go is offered to it; at the end of
    that grace it counts as declining (NO_ANSWERER, by the sweeper's timer), and an ask
    after that fails at once."""
    async with backend.seam() as seam, sweeping(backend):
        ghost = GroupSpec("desk", 0, "memory", timing={"decision_window_ms": 0, "ttl_ms": 2000})
        await register_ghost(seam, ghost, live_ms=300)
        await until(lambda: lapsed(seam, "desk"), "the ghost's liveness ran out")
        ids: list[str] = []
        ask = asyncio.create_task(seam.ask(SEED, caller(), on_published=ids.append))
        await until(lambda: asyncio.sleep(0, bool(ids)), "the ask was offered to the ghost")
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(ask, 10)
        assert err.value.code is ErrorCode.NO_ANSWERER
        events = [(e["e"], e.get("group") or e.get("groups")) for e in await trail(seam, ids[0])]
        assert events == [
            ("asked", None),
            ("offered", "desk"),
            ("overdue", "desk"),
            ("failed", None),
        ]
        ids.clear()
        with pytest.raises(AskError) as err:  # its grace is over: nobody can answer
            await seam.ask(SEED, caller("t2"), on_published=ids.append)
        assert err.value.code is ErrorCode.NO_ANSWERER and not ids


async def test_the_sweeper_leaves_a_stalled_groups_claims_to_it(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of the same class: the sweeper gives back what a group with no live replica
    holds (past ASKQ_ORPHAN_CLAIM_AFTER). A group whose beats were held past its TTL
    had its claims, long held by its humans, released under it (the ask ended
    NO_ANSWERER). Now it keeps them through its grace."""
    async with backend.seam(consumer_ttl=1.5) as seam:
        held = hold_beats(seam, monkeypatch)
        human = MemoryAnswerer()
        async with running(seam, human, "desk"):
            task = asyncio.create_task(seam.ask(SEED, caller()))
            offer = await human.next_presented()  # claimed, shown to its humans
            await until(lambda: lapsed(seam, "desk"), "the group's liveness ran out")
            async with backend.seam(orphan_claim_after=0.01) as sweeper_seam:
                assert await Sweeper(sweeper_seam).release_orphans() == 0
            held.set()
            await human.answer(offer.request_id, YES)
            assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON


async def test_a_live_group_is_preferred_to_an_overdue_one(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An overdue group is a last resort: a live group of a later tier takes the
    question, as before."""
    async with backend.seam() as seam:
        ghost = GroupSpec("desk", 0, "memory", timing={"ttl_ms": 60_000})
        await register_ghost(seam, ghost, live_ms=1)
        await until(lambda: lapsed(seam, "desk"), "the ghost's liveness ran out")
        async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "rules", priority=5):
            ids: list[str] = []
            assert (await seam.ask(SEED, caller(), on_published=ids.append)).to_json() == YES_JSON
            offered = [e for e in await trail(seam, ids[0]) if e["e"] == "offered"]
            assert [(e["groups"], e.get("overdue")) for e in offered] == [("rules", None)]


# --- a registry lost -------------------------------------------------------------------


def registry_keys(seam: Seam, group: str) -> list[str]:
    return [
        key
        for shard in seam.shards
        for key in (
            shard.keys.groups,
            shard.keys.group_info,
            shard.keys.live,
            shard.keys.consumers(group),
            shard.keys.registry,
        )
    ]


async def test_an_ask_while_a_lost_registry_fills_up_again_is_answered(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-flight asks ended NO_ANSWERER at a master kill: the promoted replica may lack
    the registry (async replication), and until the next heartbeat registers the group
    again, routing saw none. Simulated by deleting the registry under a live group, as a
    failover to a replica that lacked it would: the ask waits for the group to register
    again (WAIT, within about a heartbeat and a TTL) and is answered."""
    async with backend.seam(consumer_ttl=1.5) as seam:
        async with running(seam, MemoryAnswerer(reply=lambda offer: YES), "rules"):
            asks = count_asks(seam, monkeypatch)
            for key in registry_keys(seam, "rules"):
                await seam.redis.delete(key)
            answers = await asyncio.wait_for(seam.ask(SEED, caller()), 10)
            assert answers.to_json() == YES_JSON
            assert asks[0] == "WAIT" and asks[-1] == "OFFERED", asks


async def test_a_deployment_with_no_group_fails_no_answerer_at_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker tells a registry that was lost from one that never had a group: an
    ask to a new deployment is not made to wait."""
    async with backend.seam() as seam:
        asks = count_asks(seam, monkeypatch)
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, caller())
        assert err.value.code is ErrorCode.NO_ANSWERER
        assert asks == ["NO_ANSWERER"]
        async with running(seam, MemoryAnswerer(), "desk"):
            pass  # a group that came and left cleanly: not waited for either
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, caller("t2"))
        assert err.value.code is ErrorCode.NO_ANSWERER
        assert asks == ["NO_ANSWERER", "NO_ANSWERER"]


async def test_a_lost_registry_no_group_comes_back_to_is_no_answerer_after_the_wait(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait is bounded: with no group registering again within it, NO_ANSWERER."""
    async with backend.seam(consumer_ttl=0.3) as seam:
        async with running(seam, MemoryAnswerer(), "desk"):
            pass
        asks = count_asks(seam, monkeypatch)
        await seam.scripts.tier_streams(refresh=True)  # the caller knows this registry
        for key in registry_keys(seam, "desk"):
            await seam.redis.delete(key)
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(seam.ask(SEED, caller()), 10)
        assert err.value.code is ErrorCode.NO_ANSWERER
        assert asks[0] == "WAIT" and asks[-1] == "NO_ANSWERER" and len(asks) > 2, asks
