"""The audit trail as the scripts write it: one entry per transition, none for a step
retried after STALE, kept exactly as long as the request; the capped index of recent
settlements; the optional deployment stream."""

from __future__ import annotations

import asyncio
import json

from conftest import SEED, YES, Backend, running

from askq import AskError, Caller, ErrorCode
from askq._audit import Audit
from askq.answerers.memory import MemoryAnswerer


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


async def test_recent_index_is_capped_and_the_stream_is_off_unless_asked(
    backend: Backend,
) -> None:
    rules = MemoryAnswerer(reply=lambda o: YES)
    async with backend.seam(recent_max=3) as seam, running(seam, rules, "rules"):
        ids = []
        for n in range(5):
            await seam.ask(SEED, caller(f"t{n}"))
            ids.append((await rules.next_presented()).request_id)
        recent = await seam.redis.zrange(seam.keys.recent, 0, -1)
        assert recent == ids[2:]  # the latest three, oldest first
        assert await seam.redis.exists(seam.keys.audit_log) == 0
    async with backend.seam(audit_stream_maxlen=100) as seam, running(seam, rules, "rules"):
        await seam.ask(SEED, caller("t-streamed"))
        offer = await rules.next_presented()
        entries = await seam.redis.xrange(seam.keys.audit_log)
        streamed = [json.loads(f["entry"])["e"] for _, f in entries]
        assert streamed == ["asked", "offered", "accepted", "answered"]
        assert {f["request"] for _, f in entries} == {offer.request_id}
