"""Redis Sentinel: `ASKQ_REDIS_URL=redis+sentinel://host:port,.../mymaster/0`.

The URL's parsing and errors need no server. The rest runs against a Sentinel set the
tests start themselves (tests/sentinel_servers.py: one master, one replica, three
sentinels on loopback): asks answered through it by `askq` processes (caller, answerer
replicas, `askq sweeper` with its arq worker), the command pool bounded, and failovers
under load — SENTINEL FAILOVER, and a SIGKILLed master — with every ask's outcome
counted: lost (no outcome, or an error for an ask whose question had been published),
settled twice (events stream), hung (no outcome in time). All must be 0.

The data nodes run with `min-replicas-to-write 1`: Sentinel replicates asynchronously,
and without it the demoted master goes on taking writes for seconds after the promotion
(until the sentinels reconfigure it), all of which the failover then discards
(deploy/README.md, "Sentinel").
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sentinel_servers import SentinelSet
from test_faults import (
    FAULT_CALLER,
    Procs,
    environ,
    events_by_request,
    eventually,
    presented,
    procs,
    settings,
    settlements,
)

from askq import AskError, Caller, ErrorCode, Seam, Settings
from askq.observing._metrics import RedisCollector
from askq.redis._arq import arq_client
from askq.redis._connections import check_redis_url, command_client
from askq.redis._sentinel import BlockingSentinelPool, parse_sentinel_url, sync_sentinel_client
from askq.redis._wire import NotConnected, redacted
from bench._redis_server import redis_server_binary

__all__ = ["procs"]  # the fixture, used by name

SAFE = ("min-replicas-to-write 1", "min-replicas-max-lag 10")


# --- the URL, no server ----------------------------------------------------------------


def test_sentinel_url_names_sentinels_service_database_and_credentials() -> None:
    target = parse_sentinel_url(
        "redis+sentinel://al%40ice:s3cr%2Ft@10.0.0.1:5000,sent-b,[::1]:26380,[::2]/prod/3"
    )
    assert target.sentinels == (
        ("10.0.0.1", 5000), ("sent-b", 26379), ("::1", 26380), ("::2", 26379)
    )  # fmt: skip
    assert (target.service, target.db) == ("prod", 3)
    assert (target.username, target.password) == ("al@ice", "s3cr/t")
    bare = parse_sentinel_url("redis+sentinel://secret@h:1/svc")
    assert (bare.username, bare.password, bare.db) == (None, "secret", 0)
    # arq's client goes through the same sentinels to the same master and database.
    arq = arq_client(Settings(redis_url="redis+sentinel://:pw@h:1,g:2/svc/2"), "q")
    pool = arq.connection_pool
    assert isinstance(pool, BlockingSentinelPool) and pool.service_name == "svc"
    sentinels = [
        (c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
        for c in pool.sentinel_manager.sentinels
    ]
    assert sentinels == [("h", 1), ("g", 2)]
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (2, "pw")
    assert "pw" not in redacted("redis+sentinel://u:pw@h:1,g:2/svc/2")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:1", "no service name"),
        ("redis+sentinel://h:1/", "no service name"),
        ("redis+sentinel://h:x/svc", "port 'x' is not a number"),
        ("redis+sentinel://h:1,,g:2/svc", "has no host"),
        ("redis+sentinel://h:1/svc/zero", "database 'zero' is not a number"),
        ("redis+sentinel://h:1/svc/0/more", "the path is /SERVICE or /SERVICE/DB"),
        ("redis+sentinel://u:pw@h:1/svc?db=1", "no query"),
    ],
)
def test_a_malformed_sentinel_url_is_a_config_error_naming_it(url: str, says: str) -> None:
    with pytest.raises(AskError) as err:
        check_redis_url(url)
    assert err.value.code is ErrorCode.CONFIG_ERROR
    assert says in err.value.message
    assert "pw" not in err.value.message


async def test_no_sentinel_answering_is_not_connected_and_redis_unavailable() -> None:
    """Nothing listens where the URL's sentinels should be: the command was never
    sent (NotConnected), and the seam says REDIS_UNAVAILABLE naming the URL, no
    password."""
    from bench._redis_server import free_port

    url = f"redis+sentinel://u:pw@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/svc/0"
    seam = Seam(settings=Settings(redis_url=url, socket_timeout=1))
    with pytest.raises(AskError) as err:
        await seam.ping()
    await seam.aclose()
    assert err.value.code is ErrorCode.REDIS_UNAVAILABLE
    assert isinstance(err.value.__cause__, NotConnected)
    assert "No master found for 'svc'" in err.value.message and "pw" not in err.value.message


async def _stale_and_fresh_sentinels(old_port: int, new_port: int) -> tuple[Any, list[int]]:
    """Two stand-in sentinels speaking RESP on loopback, as they stand right after a
    failover: the first has not heard of it yet and still names the old master (config
    epoch 1), the second names the promoted one (epoch 2)."""

    def state(port: int, epoch: int) -> bytes:
        fields = {
            "name": "mymaster", "ip": "127.0.0.1", "port": str(port), "flags": "master",
            "num-other-sentinels": "1", "quorum": "1", "config-epoch": str(epoch),
        }  # fmt: skip
        items = [x.encode() for pair in fields.items() for x in pair]
        return b"*1\r\n*%d\r\n" % len(items) + b"".join(
            b"$%d\r\n%s\r\n" % (len(x), x) for x in items
        )

    async def serve(reply: bytes, reader: asyncio.StreamReader, writer: Any) -> None:
        try:
            while line := await reader.readline():
                if not line.startswith(b"*"):
                    continue
                words = []
                for _ in range(int(line[1:])):
                    await reader.readline()  # $len
                    words.append((await reader.readline()).strip().upper())
                if words[:2] == [b"SENTINEL", b"MASTERS"]:
                    writer.write(reply)
                else:  # PING, CLIENT SETINFO, ...
                    writer.write(b"+OK\r\n")
                await writer.drain()
        finally:
            writer.close()

    servers, ports = [], []
    for port, epoch in ((old_port, 1), (new_port, 2)):
        reply = state(port, epoch)
        server = await asyncio.start_server(
            lambda r, w, reply=reply: serve(reply, r, w), "127.0.0.1", 0
        )
        servers.append(server)
        ports.append(server.sockets[0].getsockname()[1])
    return servers, ports


async def test_the_newest_configuration_names_the_master(tmp_path: Path) -> None:
    """Right after a failover the sentinels disagree for a moment: one that has not yet
    heard of it names the old master, which a supervisor has already restarted (empty,
    no persistence, a master until the sentinels demote it). Asking the first sentinel
    that answers (redis-py's way) wrote asks to that node, whose data the sentinels then
    wiped: every question asked there was lost (the kill test's NOT_FOUND, 52 of 150
    once). The master of the highest config epoch is the one connected to, by every
    client askq makes (the metrics scrape's too)."""
    from bench._redis_server import RedisServer

    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    with RedisServer(tmp_path / "old") as old, RedisServer(tmp_path / "new") as new:
        new.client().set("where", "the promoted master")
        servers, ports = await _stale_and_fresh_sentinels(old.port, new.port)
        try:
            url = f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster/0"
            settings = Settings(redis_url=url, socket_timeout=2)
            async with Seam(settings=settings) as seam:
                assert await seam.redis.get("where") == "the promoted master"
            # ... and the metrics scrape's synchronous client (the stand-ins answer on
            # this loop: the client runs in a thread)
            scrape = sync_sentinel_client(settings, "askq-metrics")
            try:
                assert await asyncio.to_thread(scrape.get, "where") == "the promoted master"
            finally:
                scrape.close()
        finally:
            for server in servers:
                server.close()


# --- a Sentinel set on loopback --------------------------------------------------------


@pytest.fixture
def sentinels(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SentinelSet]:
    if redis_server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not on PATH; CI must run the Sentinel tests")
        pytest.skip("redis-server is not on PATH (the Sentinel tests start their own)")
    extra = getattr(request, "param", SAFE)  # the data nodes' extra settings
    group = SentinelSet(tmp_path / "sentinel", extra=extra).start()
    try:
        yield group
    finally:
        group.stop()


pytestmark = pytest.mark.real


async def test_asks_answered_through_sentinel(sentinels: SentinelSet, procs: Procs) -> None:
    """An answering replica, `askq sweeper` (its arq worker too) and `askq ask`, all
    given only the sentinel URL, find the master and answer; one process's 40 asks at
    once hold at most ASKQ_MAX_CONNECTIONS command connections + the reply waiter."""
    await procs.worker(sentinels, "w1", "--group", "desk", "--mode", "answer")  # type: ignore[arg-type]
    sweeper = await procs.sweeper(sentinels, "sweeper")  # type: ignore[arg-type]
    asked = procs.ask(sentinels, "cli", "--agent", "a", "--turn", "t")  # type: ignore[arg-type]
    assert await asked.exited(30) == 0, asked.err()
    assert json.loads(asked.out())["answers"][0]["selected"] == ["Yes, delete them (Recommended)"]

    # The command pool waits for a connection when all are busy (redis-py's sentinel
    # pool would fail "Too many connections"): six slow commands on a pool of two.
    pool_of_two = command_client(None, settings(sentinels, max_connections=2), "pool2")  # type: ignore[arg-type]
    slow = [pool_of_two.blpop([f"nothing-{i}"], 0.3) for i in range(6)]
    assert await asyncio.gather(*slow) == [None] * 6
    assert len([c for c in await pool_of_two.client_list() if c["name"] == "pool2"]) == 2
    await pool_of_two.aclose()

    async with Seam(settings=settings(sentinels, max_connections=3)) as seam:  # type: ignore[arg-type]
        asks = [seam.ask(_seed(), Caller(agent_id=f"a{i}", turn_id=f"t{i}")) for i in range(40)]
        done = await asyncio.wait_for(asyncio.gather(*asks), 30)
        assert len(done) == 40
        clients = await seam.redis.client_list()
        mine = [c for c in clients if c["name"] == seam.client_name]
        assert 1 <= len(mine) <= 3 + 1, mine
        # arq's worker in the sweeper reached the master through the sentinels too:
        # its health-check key is written at its start.
        queue = seam.keys.base + ":arq:sweeper"
        assert await eventually(lambda: seam.redis.exists(queue + ":health-check"), 10)
    assert sweeper.alive(), sweeper.err()
    # the metrics scrape's own (synchronous) client finds the master too
    collected = list(RedisCollector(settings(sentinels)).collect())  # type: ignore[arg-type]
    assert collected[0].name == "askq_redis_up" and collected[0].samples[0].value == 1


async def test_a_command_waits_through_a_failover_for_the_new_master(
    sentinels: SentinelSet,
) -> None:
    """The master is SIGKILLed: a command that must connect (the sentinels still name
    the dead master, then none, then the promoted replica) waits for the new master
    instead of failing REDIS_UNAVAILABLE at once, and gets its answer there. A URL
    naming a service no sentinel monitors is still refused at once."""
    import redis

    with redis.Redis(port=sentinels.master_port()) as master:
        master.set("kept", "yes")
        assert master.wait(1, 5000) == 1  # on the replica too
    client = command_client(None, settings(sentinels, sentinel_retry_seconds=20))  # type: ignore[arg-type]
    assert await client.get("kept") == "yes"
    old = sentinels.kill_master()
    await client.connection_pool.disconnect()  # the next command connects anew
    started = time.monotonic()
    assert await asyncio.wait_for(client.get("kept"), 30) == "yes"
    waited = time.monotonic() - started
    assert sentinels.master_port() != old
    await client.aclose()
    print(f"\nwaited {waited:.2f} s for the new master")

    other = settings(sentinels, sentinel_retry_seconds=20)  # type: ignore[arg-type]
    other.redis_url = other.redis_url.replace("/mymaster/", "/nosuch/")
    stray = command_client(None, other)
    started = time.monotonic()
    with pytest.raises(NotConnected, match="No master found for 'nosuch'"):
        await stray.ping()
    assert time.monotonic() - started < 5  # not the retry window
    await stray.aclose()


def _seed() -> dict[str, object]:
    from conftest import SEED

    return dict(SEED)


async def _failover_under_load(
    sentinels: SentinelSet, procs: Procs, fault: str, n: int = 150, *, safe: bool = True
) -> Counter[str]:
    workers = [
        await procs.worker(  # type: ignore[arg-type]
            sentinels, f"w{i}", "--group", "humans", "--mode", "answer", "--delay", "2",
            consumer_ttl=30.0, caller_ttl=30.0,
        )
        for i in (1, 2)
    ]  # fmt: skip
    await procs.sweeper(sentinels, "sweeper", consumer_ttl=30.0, caller_ttl=30.0)  # type: ignore[arg-type]
    caller = procs.start(
        "caller",
        [*FAULT_CALLER, "-n", str(n), "--spread", "4", "--key-prefix", "load"],
        environ(sentinels, consumer_ttl=30.0, caller_ttl=30.0),  # type: ignore[arg-type]
    )
    await eventually(
        lambda: sum(len(presented(w)) for w in workers) >= n // 3, 30, "load in flight"
    )
    started = time.monotonic()
    old = sentinels.failover() if fault == "failover" else sentinels.kill_master()
    new = await asyncio.to_thread(sentinels.wait_master_moved, old)
    moved = time.monotonic()
    if fault == "kill":
        # A supervisor restarts the killed node; the sentinels make it a replica of the
        # new master, which then has a replica in sync again and takes writes.
        sentinels.restart(old)

    code = await caller.exited(120)  # hung asks: the caller would not exit
    assert code == 0, caller.err()[-3000:]
    if fault == "kill":  # the new master takes writes once its replica is in sync again
        await asyncio.to_thread(sentinels.wait_settled)
    outcomes = [json.loads(line) for line in caller.out().splitlines()]
    by_outcome = Counter(o["outcome"] for o in outcomes)
    missing = n - len({o["i"] for o in outcomes})
    async with Seam(settings=settings(sentinels)) as seam:  # type: ignore[arg-type]
        found = [await seam.idempotent_request(o["key"]) for o in outcomes]
        ids = [request_id for request_id in found if request_id is not None]
        events = await events_by_request(seam, ids)
        twice = sum(settlements(events, i) > 1 for i in ids)
        unsettled = sum(settlements(events, i) == 0 for i in ids)
        answered_twice = max(
            Counter(line[1] for w in workers for line in w.lines("answered")).values()
        )
    lost = missing + sum(v for k, v in by_outcome.items() if k != "ANSWERED")
    # asks pending when the master was failed, and asks made while it moved
    across = [o for o in outcomes if o["started"] < started < o["ended"]]
    during = [o for o in outcomes if started <= o["started"] <= moved]
    print(
        f"sentinel {fault}{'' if safe else ' (no min-replicas-to-write)'}: master {old} ->"
        f" {new} in {moved - started:.2f} s; {n} asks: {dict(by_outcome)}; pending at the"
        f" fault {len(across)}, asked while it moved {len(during)}, re-asked"
        f" {sum(o['retries'] > 0 for o in outcomes)}; lost {lost}, settled twice {twice},"
        f" hung {missing}; on the new master: requests whose idempotency key is gone"
        f" {n - len(ids)}, open again after their caller had its outcome {unsettled}"
    )
    what_happened = "what the sentinels did:\n" + sentinels.events()
    assert missing == 0, what_happened  # none hung
    if safe:
        assert by_outcome == Counter({"ANSWERED": n}), what_happened  # none lost, none failed
        # ... and none failed even for a moment: an ask made while the master moved
        # waited for the new one (ASKQ_SENTINEL_RETRY_SECONDS); the caller had nothing
        # to ask again.
        assert sum(o["retries"] for o in outcomes) == 0, "REDIS_UNAVAILABLE during the failover"
        assert len(ids) == n and twice == 0 and unsettled == 0  # each settled once
        assert answered_twice == 1
        assert across, "no ask was in flight across the failover"
    return by_outcome


async def test_sentinel_failover_under_load(sentinels: SentinelSet, procs: Procs) -> None:
    """SENTINEL FAILOVER with 150 asks in flight (a caller process, two answering
    replicas, a sweeper): every ask answered once; none lost, settled twice or hung."""
    await _failover_under_load(sentinels, procs, "failover")


async def test_sentinel_master_killed_under_load(sentinels: SentinelSet, procs: Procs) -> None:
    """The master SIGKILLed with 150 asks in flight: the sentinels promote the replica
    (after down-after-milliseconds); the killed node, restarted, rejoins as a replica.
    Every ask answered once; none lost, settled twice or hung."""
    await _failover_under_load(sentinels, procs, "kill")


@pytest.mark.parametrize("sentinels", [()], indirect=True)
async def test_sentinel_failover_without_min_replicas(sentinels: SentinelSet, procs: Procs) -> None:
    """The same failover with data nodes that take writes without a replica (no
    min-replicas-to-write): the demoted master acknowledges writes for seconds after
    the promotion, and the failover discards them. No ask hangs: one whose request was
    discarded fails NOT_FOUND ("Redis lost this question"), a clear error; but a
    question settled only on the old master is open again on the new one (its caller
    already had the answer). The printed figures show what the setting prevents."""
    outcomes = await _failover_under_load(sentinels, procs, "failover", safe=False)
    assert set(outcomes) <= {"ANSWERED", "NOT_FOUND"}, outcomes
