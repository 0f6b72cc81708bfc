"""Auto-pipelining of script calls (worker/redis/_pipeline.py): batched under load, one
result per call, in order, failures kept to their own call. And the connection class
(worker/redis/_connections.py) that packs and sends them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, cast

import pytest
from conftest import SEED, YES, YES_JSON, Backend, running
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from askq import Caller, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.redis._cluster import is_cluster_url
from askq.redis._connections import command_client
from askq.redis._pipeline import ScriptPipeline
from askq.redis._wire import _HiredisPacking, with_hiredis_packing

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)

# Appends its argument to a list and returns the list's new length; fails on "boom".
APPEND = """
if ARGV[1] == 'boom' then return redis.error_reply('ERR boom asked for') end
return redis.call('RPUSH', KEYS[1], ARGV[1])
"""


class Log:
    """A list in Redis appended to by APPEND calls through one ScriptPipeline."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.key = "{" + prefix + "}:log"
        self.pipeline = ScriptPipeline(redis)
        self.script = redis.register_script(APPEND)

    def append(self, item: str) -> Coroutine[Any, Any, Any]:
        return self.pipeline.call(self.script, [self.key], [item])

    async def items(self) -> list[str]:
        return await self.redis.lrange(self.key, 0, -1)  # type: ignore[no-any-return,misc]


@pytest.fixture
async def log(backend: Backend) -> AsyncIterator[Log]:
    client = command_client(None, backend.settings())  # on a cluster, the cluster client
    yield Log(client, backend.prefix)
    await client.aclose()


async def test_concurrent_calls_go_out_in_few_batches_in_order(log: Log) -> None:
    lengths = await asyncio.gather(*(log.append(str(i)) for i in range(300)))
    assert lengths == list(range(1, 301))  # each call its own result
    assert await log.items() == [str(i) for i in range(300)]  # in order
    # All made in one turn of the loop: they go out batched (at most 256 a batch),
    # not in 300 round trips.
    assert log.pipeline.calls == 300
    assert 2 <= log.pipeline.batches <= 4


async def test_a_failing_call_fails_alone(log: Log) -> None:
    results = await asyncio.gather(
        *(log.append(arg) for arg in ["a", "b", "boom", "c"]),
        return_exceptions=True,
    )
    assert results[:2] == [1, 2] and results[3] == 3
    assert isinstance(results[2], ResponseError) and "boom asked for" in str(results[2])


async def test_scripts_run_after_redis_lost_its_script_cache(log: Log) -> None:
    """A restarted Redis answers NOSCRIPT: the script did not run, so it is loaded and
    run, once, for every call of the batch."""
    assert await log.append("first") == 1
    await log.redis.script_flush()
    lengths = await asyncio.gather(*(log.append(str(i)) for i in range(20)))
    assert sorted(lengths) == list(range(2, 22))
    assert len(await log.items()) == 21


async def test_a_cancelled_caller_does_not_cancel_its_call_or_the_others(log: Log) -> None:
    first = asyncio.create_task(log.append("first"))
    await asyncio.sleep(0)  # the first is out; the next two wait for it, batched
    cancelled = asyncio.create_task(log.append("cancelled"))
    kept = asyncio.create_task(log.append("kept"))
    await asyncio.sleep(0)
    cancelled.cancel()
    assert await first == 1 and await kept == 3
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await log.items() == ["first", "cancelled", "kept"]


class HoldsDecisions(MemoryAnswerer):
    """Decides nothing until `n` offers wait on it, then all at once: the replica's
    calls for them are all made while its first batch is out, however the offers
    trickled in (on a loaded machine they may come one read at a time)."""

    def __init__(self, n: int) -> None:
        super().__init__(reply=lambda offer: YES)
        self.n = n
        self.all_in = asyncio.Event()

    async def decide(self, offer: Any) -> bool:
        if len(self.decided) + 1 >= self.n:
            self.all_in.set()
        verdict = await super().decide(offer)
        await self.all_in.wait()
        return verdict


async def test_many_asks_of_one_process_share_pipelines(backend: Backend, seam: Seam) -> None:
    """End to end: 200 asks at once from one seam, answered by one replica, take far
    fewer round trips than scripts on both sides."""
    async with backend.seam() as worker_seam:
        async with running(worker_seam, HoldsDecisions(200), "rules"):
            results = await asyncio.gather(
                *(seam.ask(SEED, Caller(agent_id="a", turn_id=f"t{i}")) for i in range(200))
            )
        assert {r.to_json() for r in results} == {YES_JSON}
        for side in (seam, worker_seam):
            # Each shard has its pipeline (ASKQ_SHARDS): counted over all of them.
            calls = sum(shard.scripts.pipeline.calls for shard in side.shards)
            batches = sum(shard.scripts.pipeline.batches for shard in side.shards)
            assert calls >= 200
            assert batches < calls / 2


@pytest.mark.parametrize(
    "command",
    [
        ("EVALSHA", "0" * 40, 2, "{p}:req:1", b"{p}:raw", "é ✓", 0.1, -5, 10**20, ""),
        ("CLIENT SETNAME", "askq-1"),
        (b"CONFIG GET", b"maxmemory-policy"),
        ("XADD", "{p}:tier:0", "MAXLEN", "~", 1000, "*", "payload", "x" * 100_000),
    ],
)
def test_hiredis_packs_what_redis_py_would(command: tuple[object, ...]) -> None:
    """Commands are packed by hiredis: the same bytes on the wire as redis-py's own
    packer, for every kind of argument askq sends."""
    ours = with_hiredis_packing(Connection)()
    theirs = Connection()
    assert b"".join(ours.pack_command(*command)) == b"".join(theirs.pack_command(*command))
    assert b"".join(ours.pack_commands([command, command])) == b"".join(
        theirs.pack_commands([command, command])
    )


def backend_is_cluster(seam: Seam) -> bool:
    return is_cluster_url(seam.settings.redis_url)


async def test_a_seam_talks_through_hiredis_packing(seam: Seam) -> None:
    await seam.ping()
    if backend_is_cluster(seam):  # the class its nodes' connections are made of
        cls = seam.redis.connection_kwargs["connection_class"]
    else:
        cls = seam.redis.connection_pool.connection_class
    assert issubclass(cls, _HiredisPacking)
    assert issubclass(seam.blocking_connection().connection_pool.connection_class, _HiredisPacking)



async def _connection(url: str, socket_timeout: float) -> Connection:
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    conn = with_hiredis_packing(Connection)(
        host=host, port=int(port), socket_timeout=socket_timeout, decode_responses=True
    )
    await conn.connect()
    return cast(Connection, conn)


async def test_a_send_stuck_on_a_full_buffer_times_out_and_drops_the_connection(
    real_url: str,
) -> None:
    """The send is bounded by the socket timeout (without redis-py's task per send): a
    write that cannot drain fails as redis-py's does, and the half-sent connection is
    not used again."""
    conn = await _connection(real_url, socket_timeout=0.2)
    await conn.send_command("PING")
    assert await conn.read_response() == "PONG"

    async def never_drains() -> None:
        await asyncio.Event().wait()

    conn._writer.drain = never_drains  # type: ignore[union-attr,method-assign]
    started = time.monotonic()
    with pytest.raises(RedisTimeoutError, match="Timeout writing to socket"):
        await conn.send_command("PING")
    assert 0.15 < time.monotonic() - started < 2
    assert not conn.is_connected


async def test_a_send_the_socket_refuses_is_a_connection_error(real_url: str) -> None:
    conn = await _connection(real_url, socket_timeout=1)

    def broken(data: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    conn._writer.writelines = broken  # type: ignore[union-attr,method-assign]
    with pytest.raises(RedisConnectionError, match="writing to socket.*Broken pipe"):
        await conn.send_command("PING")
    assert not conn.is_connected
    # A new command connects again.
    await conn.send_command("PING")
    assert await conn.read_response() == "PONG"
    await conn.disconnect()


async def test_calls_of_a_cancelled_sender_are_cancelled_not_left_waiting(log: Log) -> None:
    """At shutdown the sender may be cancelled mid-batch: its callers see the
    cancellation instead of waiting for ever."""
    calls = [asyncio.create_task(log.append(str(i))) for i in range(5)]
    await asyncio.sleep(0)  # all queued, the sender created
    assert log.pipeline._sender is not None
    log.pipeline._sender.cancel()
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
