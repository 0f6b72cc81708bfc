"""The audit trail as the scripts write it: one entry per transition, none for a step
retried after STALE, kept exactly as long as the request; the capped index of recent
settlements; the optional deployment stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from conftest import SEED, YES, Backend, running

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.observing._audit import Audit, RequestFilter
from askq.observing._recent import recent_in_shards


def caller(turn: str) -> Caller:
    return Caller(agent_id="agent", turn_id=turn)


async def trail(backend: Backend, request_id: str) -> list[dict[str, object]]:
    async with backend.seam() as seam:
        return [json.loads(e) for e in await seam.redis.lrange(seam.keys.audit(request_id), 0, -1)]


async def test_a_step_retried_after_stale_writes_its_entry_once(backend: Backend) -> None:
    """The declining group's view of the tiers is stale (a tier appeared after it
    read them): its decline runs STALE, then again; the trail says `declined` once."""
    async with backend.seam() as asker, backend.seam() as first, backend.seam() as later:
        async with running(first, MemoryAnswerer(accept=False), "first", priority=0):
            human = MemoryAnswerer()
            async with running(later, human, "later", priority=5):
                task = asyncio.create_task(asker.ask(SEED, caller("t")))
                offer = await human.next_presented()
                await human.answer(offer.request_id, YES)
                await task
    events = [e["e"] for e in await trail(backend, offer.request_id)]
    assert events == ["asked", "offered", "declined", "offered", "accepted", "answered"]


async def test_the_trail_lives_as_long_as_the_request(backend: Backend) -> None:
    async with backend.seam(settled_ttl=600) as seam:
        mem = MemoryAnswerer()
        async with running(seam, mem, "desk"):
            task = asyncio.create_task(seam.ask(SEED, caller("t")))
            offer = await mem.next_presented()
            key = seam.keys.audit(offer.request_id)
            assert await seam.redis.ttl(key) == -1  # pending: kept, like the request
            assert await seam.abort_turn("t", by="ops") == 1
            try:
                await task
            except AskError as exc:
                assert exc.code is ErrorCode.ABORTED
        assert 590 <= await seam.redis.ttl(key) <= 600
        assert 590 <= await seam.redis.ttl(seam.keys.request(offer.request_id)) <= 600
        last = json.loads((await seam.redis.lrange(key, -1, -1))[0])
        assert (last["e"], last["code"], last["by"], last["reason"]) == (
            "cancelled",
            "ABORTED",
            "ops",
            "turn aborted",
        )
        detail = await Audit(seam.redis, seam.keys, seam.settings).show(offer.request_id)
        assert detail.outcome == "CANCELLED (ABORTED): the turn was aborted"
        assert detail.message is not None and detail.message.startswith("The user aborted")


def first_digit(seam: Seam, digit: Callable[[], str]) -> None:
    """The seam's next request ids start with `digit()` (the recent index is trimmed by
    a settlement whose id starts with '0', lua/common.lua); the rest is as askq makes it."""
    for shard in seam.shards:
        make = shard.asking.new_id
        shard.asking.new_id = lambda make=make: digit() + make()[1:]  # type: ignore[misc]


async def asked_and_answered(seam: Seam, rules: MemoryAnswerer, *turns: str) -> list[str]:
    """Ask once per turn, in order; the ids of the requests, as the rules group saw them."""
    ids = []
    for turn in turns:
        await seam.ask(SEED, caller(turn))
        ids.append((await rules.next_presented()).request_id)
    return ids


async def test_recent_index_is_capped_and_the_stream_is_off_unless_asked(
    backend: Backend,
) -> None:
    rules = MemoryAnswerer(reply=lambda o: YES)
    async with backend.seam(recent_max=3) as seam, running(seam, rules, "rules"):
        digits = iter("abcde0")
        first_digit(seam, lambda: next(digits))
        ids = await asked_and_answered(seam, rules, *(f"t{n}" for n in range(5)))
        # Untrimmed so far (no id started with '0'), but listed capped: the latest three.
        assert await seam.redis.zrange(seam.keys.recent, 0, -1) == ids
        audit = Audit(seam.redis, seam.keys, seam.settings)
        assert [r.id for r in await audit.requests(RequestFilter(), 10)] == ids[:1:-1]
        assert [r.id for r in await recent_in_shards(seam, 10)] == ids[:1:-1]
        # One whose id starts with '0' trims the index to the latest three.
        ids += await asked_and_answered(seam, rules, "t5")
        assert ids[-1].startswith("0")
        assert await seam.redis.zrange(seam.keys.recent, 0, -1) == ids[3:]
        assert await seam.redis.exists(seam.keys.audit_log) == 0
    async with backend.seam(audit_stream_maxlen=100) as seam, running(seam, rules, "rules"):
        first_digit(seam, lambda: "a")  # (an id starting with 0 would trim the index)
        await seam.ask(SEED, caller("t-streamed"))
        offer = await rules.next_presented()
        entries = await seam.redis.xrange(seam.keys.audit_log)
        streamed = [json.loads(f["entry"])["e"] for _, f in entries]
        assert streamed == ["asked", "offered", "accepted", "answered"]
        assert {f["request"] for _, f in entries} == {offer.request_id}


async def test_the_recent_listing_skips_what_expired_while_the_index_still_names_it(
    backend: Backend,
) -> None:
    """Between two trims the index still names requests that expired (and, below, one
    never settled here): the listings skip them, and the next trim forgets them."""
    rules = MemoryAnswerer(reply=lambda o: YES)
    async with backend.seam() as seam, running(seam, rules, "rules"):
        digits = iter("abcd0")
        first_digit(seam, lambda: next(digits))
        ids = await asked_and_answered(seam, rules, *(f"t{n}" for n in range(4)))
        # The oldest has expired (its keys gone); an id from long ago is still there.
        k = seam.keys
        await seam.redis.delete(k.request(ids[0]), k.payload(ids[0]), k.audit(ids[0]))
        await seam.redis.zadd(k.recent, {"f" * 32: 1})
        audit = Audit(seam.redis, k, seam.settings)
        assert [r.id for r in await audit.requests(RequestFilter(), 10)] == ids[:0:-1]
        assert [r.id for r in await recent_in_shards(seam, 10)] == ids[:0:-1]
        assert [r.id for r in await recent_in_shards(seam, 2)] == ids[:1:-1]
        ids += await asked_and_answered(seam, rules, "t4")  # its id starts with '0': it trims
        # The id from long ago is forgotten; ids[0] settled just now (by hand, its keys
        # went early), so the index keeps it, and the listings still skip it.
        assert await seam.redis.zrange(k.recent, 0, -1) == ids
        assert [r.id for r in await recent_in_shards(seam, 10)] == ids[:0:-1]
