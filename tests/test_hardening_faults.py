"""Regression tests of the hardening issue that need a Redis server of their own: a
restart that loses the data (item 1), a stalled server while an ask is in flight (3),
a stalled server against the heartbeats (6). Each starts its own `redis-server` on a
free loopback port (test_faults.py's fixtures); a stall is `CLIENT PAUSE ... ALL`,
which holds every command as a busy or sleeping server does."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from conftest import SEED, YES_JSON, running
from test_faults import (  # noqa: F401 - procs is a fixture, used by name
    ASKQ,
    RedisServer,
    environ,
    eventually,
    procs,
    seam_on,
)

from askq import AskError, Caller, ErrorCode
from askq.answerers.memory import MemoryAnswerer
from bench._redis_server import RedisServer as Server

pytestmark = pytest.mark.real


@pytest.fixture
def lossy(tmp_path: Any) -> Any:
    """A server that keeps nothing on disk: a restart loses every key."""
    srv = Server(tmp_path / "lossy", aof=False).start()
    try:
        yield srv
    finally:
        srv.stop()


def pause(server: RedisServer, seconds: float) -> None:
    client = server.client()
    try:
        client.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")
    finally:
        client.close()


# --- 1. Redis restarted without its data ---------------------------------------------


async def test_1_a_worker_registers_again_after_redis_lost_its_data(
    lossy: Server,
    procs: Any,  # noqa: F811 - the fixture imported above
) -> None:
    worker = procs.start("auto", [*ASKQ, "worker", "auto"], environ(lossy))
    await worker.wait_for(": ready")

    async def ask() -> Any:
        proc = procs.ask(lossy, f"ask{len(procs.all)}")
        await proc.exited(30)
        return proc

    first = await ask()
    assert first.proc.returncode == 0, first.err()
    async with (
        seam_on(lossy) as seam,
        running(seam, MemoryAnswerer(), "hold", priority=-1, scope={"route": "hold"}) as hold,
    ):
        # A question held by a human, pending across the restart.
        holder = asyncio.create_task(
            seam.ask(SEED, Caller(agent_id="a", turn_id="t"), scope={"route": "hold"})
        )
        await hold.answerer.next_presented()  # type: ignore[attr-defined]
        lossy.kill9()  # no AOF, no RDB: everything is gone
        lossy.start()
        # Waiting callers are told their question is gone.
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(holder, 30)
        assert err.value.code in (ErrorCode.NOT_FOUND, ErrorCode.NO_ANSWERER)

        async def registered() -> bool:
            return bool(await seam.redis.hget(seam.keys.groups, "auto"))

        await eventually(registered, 15, "the group registered again")
        again = await ask()
        assert again.proc.returncode == 0, again.err()
        assert again.out().strip() == YES_JSON
        status = procs.start("status", [*ASKQ, "status", "--json"], environ(lossy))
        await status.exited(30)
        groups = json.loads(status.out())["groups"]
        assert {(g["name"], g["live_consumers"]) for g in groups} == {("auto", 1), ("hold", 1)}
    assert worker.alive()


async def test_1_a_replica_notices_its_registration_deleted_and_registers_again(
    lossy: Server,
) -> None:
    """A FLUSHDB (or a failover to a replica that lacked the keys) under a running
    replica: no restart, no reconnect, only the heartbeat notices."""
    async with seam_on(lossy) as seam:
        human = MemoryAnswerer(
            reply=lambda offer: [{"id": "cleanup", "selected": ["No, keep them"]}]
        )
        async with running(seam, human, "desk"):
            await seam.redis.flushdb()
            caller = Caller(agent_id="a", turn_id="t")

            async def answered() -> bool:
                try:
                    await asyncio.wait_for(seam.ask(SEED, caller), 5)
                    return True
                except AskError as exc:
                    assert exc.code is ErrorCode.NO_ANSWERER, exc
                    await asyncio.sleep(0.1)
                    return False

            await eventually(answered, 15, "answered after the flush")


# --- 3. an ask in flight while Redis stalls ------------------------------------------


async def test_3_an_ask_whose_reply_was_lost_is_resent_and_answered(lossy: Server) -> None:
    async with seam_on(lossy, consumer_ttl=10) as desk_seam:  # live through the stall
        human = MemoryAnswerer()
        async with running(desk_seam, human, "desk", decision_window=0):
            async with seam_on(lossy, socket_timeout=0.5, caller_ttl=3) as seam:
                other = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t0")))
                await human.next_presented()  # another ask of this process stays open
                pause(lossy, 2.0)
                asked = time.monotonic()
                ask = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t1")))
                offer = await human.next_presented(15)
                assert time.monotonic() - asked > 1.5  # it was sent during the stall
                await asyncio.sleep(0.2)
                assert not ask.done(), ask  # waiting for the human, not failed
                await human.answer(
                    offer.request_id, [{"id": "cleanup", "selected": ["No, keep them"]}]
                )
                answers = await asyncio.wait_for(ask, 10)
                assert answers.answers[0].selected == ["No, keep them"]
                assert human.presented.empty()  # asked once, however often it was sent
                other.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await other
        assert await desk_seam.redis.zcard(desk_seam.keys.pending) == 0


async def test_3_an_ask_to_an_unreachable_redis_fails_at_once(lossy: Server) -> None:
    url = lossy.url
    lossy.stop()
    from askq import Seam

    seam = Seam.from_url(url, socket_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(AskError) as err:
        await seam.ask(SEED, Caller(agent_id="a", turn_id="t"))
    assert err.value.code is ErrorCode.REDIS_UNAVAILABLE
    assert time.monotonic() - started < 3
    await seam.aclose()


# --- 6. a late heartbeat -------------------------------------------------------------


async def test_6_a_stall_that_delays_one_heartbeat_leaves_the_group_live(lossy: Server) -> None:
    """consumer_ttl 3 s (a beat a second), socket_timeout 1.3 s: the server stalls
    2.6 s just after a beat. The next beat waits on the stall; before the fix it timed
    out at 2.3 s and the one after came at 3.3 s, 0.3 s after the group's liveness ran
    out. Now the retry is already queued when the stall ends."""
    ttl = 3.0
    async with seam_on(lossy, consumer_ttl=ttl, socket_timeout=1.3) as seam:
        async with running(seam, MemoryAnswerer(), "desk"):
            probe = lossy.client()
            try:
                key = seam.keys.live

                def live_until() -> float:
                    return float(probe.zscore(key, "desk") or 0)

                # Start the stall right after a beat lands.
                first = live_until()
                deadline = time.monotonic() + 5
                while live_until() == first:
                    assert time.monotonic() < deadline, "no heartbeat"
                    await asyncio.sleep(0.005)
                pause(lossy, 2.6)
                await asyncio.sleep(2.6)
                gaps = []
                end = time.monotonic() + 2.0
                while time.monotonic() < end:
                    seconds, micros = probe.time()
                    now = seconds * 1000 + micros // 1000
                    if live_until() <= now:
                        gaps.append(now)
                    await asyncio.sleep(0.01)
            finally:
                probe.close()
    assert not gaps, f"the group looked dead for {len(gaps)} probes after the stall"
