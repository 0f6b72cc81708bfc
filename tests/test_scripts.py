"""The script layer: every lua/ file is a script the runner knows, every script runs
in the scenarios below, and none touches a key it did not declare (the check of
tests/script_checks.py, which every test of the suite runs its scripts under)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from conftest import SEED, YES, YES_JSON, Backend, running
from redis.exceptions import InvalidResponse, ResponseError
from script_checks import CHECKER

from askq import AskError, Caller, ErrorCode, Offer, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.redis._lua import INCLUDES, _raw, load, names
from askq.redis._scripts import NAMES
from askq.sweeping._sweeper import Sweeper

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)


def test_every_lua_file_is_a_script_of_the_runner() -> None:
    assert sorted(names()) == sorted(NAMES)
    for name in NAMES:
        script = load(name)
        assert script.keys, f"{name}: declares no keys"
        assert script.replies, f"{name}: declares no replies"
        assert not re.search(r"^--@include", script.text, re.MULTILINE)  # all resolved
    for include in INCLUDES:
        assert include not in NAMES and "-- uses:" not in _raw(include)


def test_a_script_sees_only_the_keys_it_declares() -> None:
    script = load("accept")
    assert script.keys == ("req", "timers", "wake", "group_info", "tier", "audit", "audit_log")
    assert script.text.startswith(
        "local K = {req = KEYS[1], timers = KEYS[2], wake = KEYS[3], group_info = KEYS[4],"
        " tier = KEYS[5], audit = KEYS[6], audit_log = KEYS[7]}"
    )
    assert not script.tiers
    assert load("decline").tiers and load("cancel").tiers and not load("answer").tiers


async def test_the_check_refuses_a_key_a_script_did_not_declare(
    backend: Backend, seam: Seam
) -> None:
    # (fakeredis sends a Lua error with its traceback, over several lines, which the
    # reply parser refuses: the script fails there too, with a message less readable)
    failed = ResponseError if backend.name == "real" else (ResponseError, InvalidResponse)
    bad = seam.redis.register_script(CHECKER + "return redis.call('GET', KEYS[1] .. 'x')")
    with pytest.raises(failed) as err:
        await bad(keys=[seam.keys.pending], args=[])
    assert backend.name != "real" or "did not declare" in str(err.value)
    unlisted = seam.redis.register_script(CHECKER + "return redis.call('LLEN', KEYS[1])")
    with pytest.raises(failed) as err:
        await unlisted(keys=[seam.keys.pending], args=[])
    assert backend.name != "real" or "no key positions listed for LLEN" in str(err.value)
    good = seam.redis.register_script(CHECKER + "return redis.call('EXISTS', KEYS[1])")
    assert await good(keys=[seam.keys.pending], args=[]) == 0


class AtOnce(MemoryAnswerer):
    async def answer_at_once(self, offer: Offer) -> Any:
        return YES, "rules"


async def test_every_script_runs_and_keeps_to_its_keys(
    seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: set[str] = set()

    def spy_on(scripts: Any) -> None:
        real_send = scripts._send  # every script goes out through it

        async def spy(name: str, *args: Any, **kwargs: Any) -> Any:
            ran.add(name)
            return await real_send(name, *args, **kwargs)

        monkeypatch.setattr(scripts, "_send", spy)

    for shard in seam.shards:  # one runner per shard (ASKQ_SHARDS)
        spy_on(shard.scripts)

    def caller(turn: str, agent: str = "agent") -> Caller:
        return Caller(agent_id=agent, turn_id=turn)

    # register, accept, answer, leave; the idempotent ask again (REDIRECT, attach)
    human = MemoryAnswerer()
    async with running(seam, human, "humans", priority=1):
        task = asyncio.create_task(seam.ask(SEED, caller("t1"), idempotency_key="k"))
        offer = await human.next_presented()
        await human.answer(offer.request_id, YES)
        assert (await task).to_json() == YES_JSON
        assert (await seam.ask(SEED, caller("t1"), idempotency_key="k")).to_json() == YES_JSON
        # decline (falls through to tier 1), release (and fails NO_ANSWERER)
        async with running(seam, MemoryAnswerer(accept=False), "nobody", priority=0):
            task = asyncio.create_task(seam.ask(SEED, caller("t2")))
            offer = await human.next_presented()
            assert offer.tier == 1
            await human.group.release(offer.request_id)
            with pytest.raises(AskError) as err:
                await task
            assert err.value.code is ErrorCode.NO_ANSWERER
        # fire (a timeout), cancel (the turn's signal), abort_turn
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, caller("t3"), timeout=0.05)
        assert err.value.code is ErrorCode.TIMED_OUT
        signal = asyncio.Event()
        task = asyncio.create_task(seam.ask(SEED, caller("t4"), signal=signal))
        await human.next_presented()
        signal.set()
        with pytest.raises(AskError):
            await task
        task = asyncio.create_task(seam.ask(SEED, caller("t5")))
        await human.next_presented()
        assert await seam.abort_turn("t5") == 1
        with pytest.raises(AskError):
            await task
        # an owner the registry names (OWNER, then DELEGATED_CALLER)
        async with seam.agent("root"), seam.agent("child", owner="root"):
            with pytest.raises(AskError) as err:
                await seam.ask(SEED, caller("t6", agent="child"))
            assert err.value.code is ErrorCode.DELEGATED_CALLER
    # claim_answer
    async with running(seam, AtOnce(), "rules", priority=0):
        assert (await seam.ask(SEED, caller("t7"))).to_json() == YES_JSON
    # forget_caller (the caller has nothing left pending), set_priority, remove_group
    await seam.forget_caller()
    # reap_caller (a caller process listed, not live: the sweeper forgets it)
    await seam.redis.sadd(seam.shards[0].keys.callers, "gone-process")  # type: ignore[misc]
    assert await Sweeper(seam).cancel_gone_callers() == 0
    assert not await seam.redis.sismember(seam.shards[0].keys.callers, "gone-process")  # type: ignore[misc]
    assert await seam.registry.set_priority("nobody", 3) == 0  # (no replica is live)
    assert await seam.registry.prune() == ["humans", "nobody", "rules"]
    assert ran == set(NAMES), set(NAMES) - ran
