"""ASKQ_SHARDS: one deployment over several hash tags (worker/redis/_shards.py).

The shard logic runs on fakeredis and the real Redis with 3 shards (several tags on
one server are valid there), and on the session's Redis Cluster with 3 shards, where
the shards must also land on different masters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from conftest import SEED, YES, YES_JSON, Backend, drop_keys, make_backend, running, sweeping
from redis.crc import key_slot

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.redis._shards import MAX_SHARDS, Layout, shard_tag

SHAPES = ["fake-3", "real-3", pytest.param("cluster-3", marks=pytest.mark.cluster)]


@pytest.fixture(params=SHAPES)
def sharded(request: pytest.FixtureRequest) -> Iterator[Backend]:
    b = make_backend(request, request.param)
    yield b
    drop_keys(b)


def turns_per_shard(layout: Layout, each: int = 1) -> list[list[str]]:
    """`each` turn ids that land in each shard."""
    found: list[list[str]] = [[] for _ in range(layout.shards)]
    i = 0
    while any(len(turns) < each for turns in found):
        turn = f"turn-{i}"
        if len(found[layout.of_turn(turn)]) < each:
            found[layout.of_turn(turn)].append(turn)
        i += 1
    return found


def caller(turn: str) -> Caller:
    return Caller(agent_id=f"agent-{turn}", turn_id=turn)


# --- the layout -----------------------------------------------------------------------


def test_one_shard_is_the_layout_askq_always_had() -> None:
    layout = Layout("askq", 1)
    assert layout.keys(0).base == "{askq}" and layout.keys(0) == layout.deployment
    assert layout.of_turn("any") == 0 and layout.of_request(layout.new_id(0)) == 0
    assert len(layout.new_id(0)) == 32


@pytest.mark.parametrize("n", [2, 3, 10, 64])
def test_shard_tags_spread_evenly_over_the_slots(n: int) -> None:
    layout = Layout("acme", n)
    slots = [key_slot(k.base.encode()) for k in layout.all_keys]
    assert len({k.base for k in layout.all_keys}) == n
    for i, slot in enumerate(slots):  # shard i in the i-th n-th of the slots
        assert i * 16384 // n <= slot < (i + 1) * 16384 // n
    # Every process computes the same tags from the prefix and n alone.
    assert [shard_tag("acme", i, n) for i in range(n)] == [k.tag for k in layout.all_keys]


def test_a_turn_names_one_shard_and_a_request_id_carries_it() -> None:
    layout = Layout("askq", 3)
    assert {layout.of_turn("t-1") for _ in range(5)} == {layout.of_turn("t-1")}
    assert {layout.of_turn(f"t-{i}") for i in range(50)} == {0, 1, 2}
    for shard in range(3):
        ids = {layout.new_id(shard) for _ in range(200)}
        assert len(ids) == 200
        # Still 32 hex digits: every id check (links, email reply addresses, the MCP
        # server's handles, REQUEST_ID_PATTERN) takes it.
        assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
        assert {layout.of_request(i) for i in ids} == {shard}
    big = Layout("askq", MAX_SHARDS)
    assert big.of_request(big.new_id(MAX_SHARDS - 1)) == MAX_SHARDS - 1
    assert layout.of_request("not-hex!") in {0, 1, 2}  # a foreign id finds nothing, calmly


# --- on a deployment ------------------------------------------------------------------


async def test_asks_land_in_their_turns_shard_and_abort_is_one_step(sharded: Backend) -> None:
    async with sharded.seam() as seam:
        mem = MemoryAnswerer()
        async with running(seam, mem, "mem"):
            turn = turns_per_shard(seam.layout)[2][0]
            tasks = [asyncio.create_task(seam.ask(SEED, caller(turn))) for _ in range(3)]
            offers = [await mem.next_presented() for _ in range(3)]
            shard = seam.shard_of_turn(turn)
            assert shard.index == 2
            assert {seam.layout.of_request(o.request_id) for o in offers} == {2}
            members = await seam.redis.smembers(shard.keys.turn(turn))  # type: ignore[misc]
            assert members == {o.request_id for o in offers}
            # One script cancels all three (it returns how many it cancelled).
            assert await seam.abort_turn(turn) == 3
            for task in tasks:
                with pytest.raises(AskError) as info:
                    await task
                assert info.value.code is ErrorCode.ABORTED
            with pytest.raises(AskError) as late:
                await seam.ask(SEED, caller(turn))
            assert late.value.code is ErrorCode.ABORTED


async def test_one_replica_answers_asks_from_every_shard(sharded: Backend) -> None:
    async with sharded.seam() as callers, sharded.seam() as replicas:
        mem = MemoryAnswerer()
        async with running(replicas, mem, "mem"):
            for shard in replicas.shards:  # registered in every shard
                assert await replicas.redis.zcard(shard.keys.consumers("mem")) == 1
            turns = [t for each in turns_per_shard(callers.layout, 2) for t in each]
            tasks = [asyncio.create_task(callers.ask(SEED, caller(t))) for t in turns]
            for _ in turns:
                offer = await mem.next_presented()
                await mem.answer(offer.request_id, YES)
            assert [(await t).to_json() for t in tasks] == [YES_JSON] * len(turns)
            status = await callers.status()
            assert [g.name for g in status.groups] == ["mem"] and status.requests == []


async def test_a_channel_answers_by_id_from_another_process(sharded: Backend) -> None:
    """A channel's GroupHandle (here the memory channel's, in another seam) reads and
    answers a request by its id alone, whatever shard it is in; so do `askq show`'s
    reads (request_status, settlement)."""
    async with sharded.seam() as asker, sharded.seam() as channel_side:
        mem = MemoryAnswerer()
        async with running(channel_side, mem, "mem"):
            for turns in turns_per_shard(asker.layout):
                task = asyncio.create_task(asker.ask(SEED, caller(turns[0])))
                offer = await mem.next_presented()
                status = await channel_side.request_status(offer.request_id)
                assert status is not None and status.state == "CLAIMED"
                assert await channel_side.holds(offer.request_id, "mem")
                await mem.answer(offer.request_id, YES, by="alice")
                assert (await task).to_json() == YES_JSON
                settled = await channel_side.settlement(offer.request_id)
                assert settled is not None and settled.by == "alice"
                with pytest.raises(AskError) as again:
                    await mem.answer(offer.request_id, YES)
                assert again.value.code is ErrorCode.ALREADY_SETTLED


async def test_the_sweeper_fires_timers_in_every_shard(sharded: Backend) -> None:
    """Escalation deadlines (the sweeper's alone to fire) in every shard: each ask
    ends NO_ANSWERER once its claim's deadline passes."""
    async with sharded.seam() as seam, sweeping(sharded) as sweeper:
        mem = MemoryAnswerer()  # claims, never answers
        async with running(seam, mem, "mem", escalate_after=0.3):
            turns = [each[0] for each in turns_per_shard(seam.layout)]
            tasks = [asyncio.create_task(seam.ask(SEED, caller(t))) for t in turns]
            for task in tasks:
                with pytest.raises(AskError) as info:
                    await asyncio.wait_for(task, 20)
                assert info.value.code is ErrorCode.NO_ANSWERER
    assert sweeper.fired >= 3


async def test_a_different_number_of_shards_is_refused_while_requests_are_pending(
    sharded: Backend,
) -> None:
    async with sharded.seam() as seam:
        mem = MemoryAnswerer()
        async with running(seam, mem, "mem"):
            assert await seam.redis.get(seam.layout.marker) == "3"
            task = asyncio.create_task(seam.ask(SEED, caller("t")))
            offer = await mem.next_presented()
            other = Seam(settings=sharded.settings(shards=2))
            try:
                with pytest.raises(AskError) as refused:
                    async with other:
                        pass
            finally:
                await other.aclose()
            assert refused.value.code is ErrorCode.CONFIG_ERROR
            assert "ASKQ_SHARDS is 2" in refused.value.message
            assert "runs with 3 shard(s)" in refused.value.message
            assert "1 request(s) pending and 1 answerer group(s) live" in refused.value.message
            await mem.answer(offer.request_id, YES)
            await task
            # Nothing pending, but a replica still runs with 3: refused as well.
            with pytest.raises(AskError) as live:
                async with sharded.seam(shards=2):
                    pass
            assert "0 request(s) pending and 1 answerer group(s) live" in live.value.message
    # Drained and stopped: the first process with another number rewrites the marker.
    async with sharded.seam(shards=2) as changed:
        assert await changed.redis.get(changed.layout.marker) == "2"


@pytest.mark.cluster
async def test_shards_land_in_their_slots_on_different_masters(
    request: pytest.FixtureRequest,
) -> None:
    """On the cluster: every key of shard i is in shard i's slot, and the 3 shards
    are on 3 masters (the cluster's slots are split evenly)."""
    b = make_backend(request, "cluster-3")
    try:
        async with b.seam() as seam:
            mem = MemoryAnswerer()
            async with running(seam, mem, "mem"):
                for turns in turns_per_shard(seam.layout):
                    task = asyncio.create_task(seam.ask(SEED, caller(turns[0])))
                    offer = await mem.next_presented()
                    await mem.answer(offer.request_id, YES)
                    await task
            tags = {k.base: key_slot(k.base.encode()) for k in seam.layout.all_keys}
        holders: dict[str, set[int]] = {}
        for client in b.all_clients():
            port = client.connection_pool.connection_kwargs["port"]
            with client:
                for pattern in b.patterns:
                    for key in client.scan_iter(match=pattern, count=1000):
                        tag = key[: key.index("}") + 1]
                        assert tag in tags or tag == "{" + b.prefix + "}", key
                        if tag in tags:
                            assert key_slot(key.encode()) == tags[tag]
                            holders.setdefault(tag, set()).add(port)
        assert sorted(holders) == sorted(tags)
        assert all(len(ports) == 1 for ports in holders.values())
        assert len({next(iter(ports)) for ports in holders.values()}) == 3
    finally:
        drop_keys(b)


async def test_status_requests_show_and_recent_read_every_shard(sharded: Backend) -> None:
    """What an operator or a dashboard reads (`askq status`, `requests`, `show`, a
    channel's recent settlements and fleet) covers every shard."""
    from askq.cli._inspect import _audit
    from askq.observing._audit import RequestFilter
    from askq.observing._status import full_status

    async with sharded.seam() as seam:
        mem = MemoryAnswerer()
        async with running(seam, mem, "mem"):
            turns = [each[0] for each in turns_per_shard(seam.layout)]
            tasks = [asyncio.create_task(seam.ask(SEED, caller(t))) for t in turns]
            ids = {(await mem.next_presented()).request_id for _ in turns}
            assert {seam.layout.of_request(i) for i in ids} == {0, 1, 2}
            assert {r.id for r in (await seam.status()).requests} == ids
            full = await full_status(seam, 100)
            assert full.pending_total == 3 and full.pending_by_state == {"CLAIMED": 3}
            assert [(g.name, g.live_consumers) for g in full.groups] == [("mem", 1)]
            from askq.observing._metrics import RedisCollector

            scraped = await asyncio.to_thread(RedisCollector(seam.settings)._read)
            gauges = {f.name: f.samples for f in scraped}
            assert gauges["askq_pending_requests_total"][0].value == 3
            fleet = await mem.group.fleet()
            assert {r.id for r in fleet.requests} == ids
            audit = _audit(seam)
            assert {r.id for r in await audit.requests(RequestFilter(state="pending"), 10)} == ids
            for request_id in ids:
                assert (await audit.show(request_id)).state == "CLAIMED"
                await mem.answer(request_id, YES, by="bob")
            for task in tasks:
                await task
            assert {r.id for r in await audit.requests(RequestFilter(state="settled"), 10)} == ids
            recent = await mem.group.recent_settlements(10)
            assert {r.id for r in recent} == ids and {r.by for r in recent} == {"bob"}


async def test_a_replica_stops_once_the_deployment_records_another_number(
    sharded: Backend,
) -> None:
    """Its heartbeat reads the marker: a replica left running with the old number
    after a re-sharding stops with CONFIG_ERROR rather than serve a layout nobody uses."""
    from askq import AnswererRuntime

    async with sharded.seam() as seam:
        task = await AnswererRuntime(seam, MemoryAnswerer(), group="mem").start(timeout=15)
        await seam.redis.set(seam.layout.marker, "2")
        with pytest.raises(AskError) as info:
            await asyncio.wait_for(task, 15)
        assert info.value.code is ErrorCode.CONFIG_ERROR
        assert "restart this process with ASKQ_SHARDS=2" in info.value.message


async def test_an_idempotent_ask_reattaches_from_another_turns_shard(sharded: Backend) -> None:
    """A call re-issued under another turn (an MCP client's new conversation id) finds
    the request its key asked, in the first turn's shard: the human is asked once."""
    async with sharded.seam() as seam:
        mem = MemoryAnswerer()
        async with running(seam, mem, "mem"):
            first_turn, other_turn = (each[0] for each in turns_per_shard(seam.layout)[:2])
            first = asyncio.create_task(seam.ask(SEED, caller(first_turn), idempotency_key="k"))
            offer = await mem.next_presented()
            again = asyncio.create_task(seam.ask(SEED, caller(other_turn), idempotency_key="k"))
            await asyncio.sleep(0.3)
            assert mem.presented.empty()  # not asked twice
            await mem.answer(offer.request_id, YES)
            assert (await first).to_json() == (await again).to_json() == YES_JSON
            # An aborted turn still fails at once, whatever shard holds the key's request.
            await seam.abort_turn("gone")
            with pytest.raises(AskError) as info:
                await seam.ask(SEED, caller("gone"), idempotency_key="k")
            assert info.value.code is ErrorCode.ABORTED
