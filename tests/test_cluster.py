"""Redis Cluster: the `redis+cluster://` URL, where a deployment's keys land (arq's
too), and a master killed under load (its replica promoted): every ask ends answered
once or with a clear error, none hangs, none is settled twice.

The tests of the seam, the scripts, the pipeline, idempotency, the store and the
sweeper also run on the session's cluster (`pytest.mark.cluster`, conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from conftest import SEED, YES, YES_JSON, Backend, running
from redis.crc import key_slot
from test_sweeper import Flaky

from askq import AskError, Caller, ErrorCode, Seam, Settings
from askq.answerers.memory import MemoryAnswerer
from askq.redis._cluster import ClusterUrl
from askq.redis._connections import check_redis_url
from askq.redis._wire import redacted
from askq.sweeping._sweeper import Sweeper


def test_a_cluster_url_names_its_seed_nodes() -> None:
    url = ClusterUrl.parse("redis+cluster://bob:s%3Acret@10.0.0.1:7000,10.0.0.2:7001/0")
    assert url.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (url.username, url.password, url.tls) == ("bob", "s:cret", False)
    assert ClusterUrl.parse("rediss+cluster://[::1]:7000").nodes == (("::1", 7000),)
    assert ClusterUrl.parse("rediss+cluster://[::1]:7000").tls


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+cluster://10.0.0.1", "expected host:port"),
        ("redis+cluster://10.0.0.1:70000", "is not a port number"),
        ("redis+cluster://10.0.0.1:7000/1", "only database 0"),
        ("redis+cluster://10.0.0.1:7000?ssl_cert_reqs=none", "no query options"),
        ("redis+cluster://:7000", "expected host:port"),
    ],
)
def test_a_malformed_cluster_url_is_a_config_error_naming_it(url: str, says: str) -> None:
    with pytest.raises(AskError) as caught:
        check_redis_url(url)
    assert caught.value.code is ErrorCode.CONFIG_ERROR and says in caught.value.message


def test_a_cluster_urls_password_is_never_shown() -> None:
    shown = redacted("redis+cluster://bob:hunter2@a:1,b:2")
    assert "hunter2" not in shown and shown == "redis+cluster://bob:***@a:1,b:2"


async def test_an_unreachable_cluster_fails_an_ask_at_once_as_never_sent() -> None:
    """No seed answers: REDIS_UNAVAILABLE at once (as for a single Redis that is not
    there), marked as never sent, not tried again for ASKQ_CLUSTER_RETRY_SECONDS."""
    from askq.redis._wire import NotConnected
    from bench._redis_server import free_port

    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    seam = Seam(settings=Settings(redis_url=url, prefix="gone", cluster_retry_seconds=60))
    try:
        with pytest.raises(AskError) as caught:
            await asyncio.wait_for(seam.ask(SEED, Caller(agent_id="a", turn_id="t")), 10)
    finally:
        await seam.aclose()
    assert caught.value.code is ErrorCode.REDIS_UNAVAILABLE
    assert isinstance(caught.value.__cause__, NotConnected)


# --- on the session's cluster -----------------------------------------------------------


@pytest.fixture
def on_cluster(cluster_url: str) -> Iterator[Backend]:
    import uuid

    b = Backend("cluster", cluster_url, f"t{uuid.uuid4().hex[:12]}")
    yield b
    with contextlib.closing(b.sync_client()) as client:
        keys = list(client.scan_iter(match="{" + b.prefix + "}:*", count=1000))
        if keys:
            client.delete(*keys)


def every_masters_keys(url: str) -> dict[int, list[str]]:
    """Every key of every master of the cluster, by the master's port."""
    seed = ClusterUrl.parse(url).nodes[0]
    with redis.Redis(host=seed[0], port=seed[1], decode_responses=True) as client:
        layout = client.execute_command("CLUSTER", "SLOTS")
    keys = {}
    for port in {int(master[1]) for _, _, master, *_ in layout}:
        with redis.Redis(host=seed[0], port=port, decode_responses=True) as node:
            keys[port] = list(node.scan_iter(count=1000))
    return keys


async def test_a_deployment_lives_in_its_slot_and_arq_under_its_prefix(on_cluster: Backend) -> None:
    """A round trip through a channel's retried send (arq) with a sweeper's arq worker
    running its rounds: every key the deployment wrote is on the master owning its
    slot, under its prefix; no `arq:` key is left anywhere in the cluster."""
    from arq.worker import Worker

    from askq.redis._arq import close_worker
    from askq.sweeping._sweeper import worker_settings

    channel = Flaky(fail=1, retry_after=0.05)
    sweeper = Worker(**worker_settings(on_cluster.settings(sweep_interval=1)), handle_signals=False)
    sweeping = asyncio.create_task(sweeper.async_run())
    try:
        async with on_cluster.seam() as seam, running(seam, channel, "slack"):
            task = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t")))
            request_id = await asyncio.wait_for(channel.posted.get(), 15)
            await channel.answer(request_id, YES)
            assert (await task).to_json() == YES_JSON
            await asyncio.sleep(1.5)  # a maintenance round or two
    finally:
        await close_worker(sweeper)
        with contextlib.suppress(asyncio.CancelledError):
            await sweeping
    keys = every_masters_keys(on_cluster.url)
    ours = {port: [k for k in found if on_cluster.prefix in k] for port, found in keys.items()}
    holders = [port for port, found in ours.items() if found]
    assert len(holders) == 1, ours  # one master: the one owning the prefix's slot
    assert all(k.startswith("{" + on_cluster.prefix + "}:") for k in ours[holders[0]])
    assert any(":arq:" in k for k in ours[holders[0]])  # arq ran here, under the prefix
    assert [k for found in keys.values() for k in found if k.startswith("arq:")] == []


# --- a master killed under load -----------------------------------------------------------


@pytest.fixture
def own_cluster() -> Iterator[Any]:
    """A cluster of the test's own: it loses a master."""
    from bench._redis_cluster import RedisCluster

    try:
        cluster = RedisCluster().start()
    except (RuntimeError, OSError) as exc:
        import os

        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Redis Cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.parametrize("shards", [1, 3])
async def test_a_master_killed_under_load_loses_hangs_and_double_settles_nothing(
    own_cluster: Any, shards: int
) -> None:
    """Callers ask without pause, a replica answers each; the master owning the
    deployment's `{prefix}` slot (with 3 shards: also shard 0's), the URL's first seed,
    is SIGKILLed and its replica promoted; the other shards' asks go on meanwhile.
    Every ask the callers started ends: answered (once), or with a clear error (the
    few in flight at the kill), never REDIS_UNAVAILABLE (what did not run is sent
    again through the failover); none hangs. Every published
    request is still in Redis afterwards with one settlement at most (its audit trail
    says so), and each answered ask got the settlement Redis kept."""
    seed = own_cluster.ports[0]  # the first seed (and redis-py's default node)
    prefix = next(
        p
        for p in (f"fault{i}" for i in range(1000))
        if own_cluster.master_of(key_slot(("{" + p + "}").encode())) == seed
    )
    settings = Settings(
        redis_url=own_cluster.url,
        prefix=prefix,
        block_seconds=1.0,
        socket_timeout=2.0,
        cluster_retry_seconds=20.0,
        consumer_ttl=15.0,
        caller_ttl=30.0,
        shards=shards,
    )
    victim = prefix
    outcomes: Counter[str] = Counter()
    answered: dict[str, str] = {}  # request id -> the settlement its caller got
    published: list[str] = []
    stop = asyncio.Event()

    async def agent(seam: Seam, n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            ids: list[str] = []
            caller = Caller(agent_id=f"agent-{n}", turn_id=f"turn-{n}-{i}")
            try:
                result = await asyncio.wait_for(
                    seam.ask(SEED, caller, on_published=ids.append), timeout=45
                )
            except TimeoutError:
                outcomes["hung"] += 1
            except AskError as exc:
                outcomes[f"error {exc.code.value}"] += 1
            else:
                outcomes["answered"] += 1
                answered[ids[-1]] = result.to_json()
            published.extend(ids)

    async with (
        Seam(settings=settings) as callers,
        Seam(settings=settings) as workers,
        running(workers, MemoryAnswerer(reply=lambda offer: YES), "rules"),
    ):
        sweeper = Sweeper(workers)
        sweeper.start()
        agents = [asyncio.create_task(agent(callers, n)) for n in range(8)]
        try:
            await asyncio.sleep(1.5)
            before = outcomes["answered"]
            killed_at = time.monotonic()
            await asyncio.to_thread(own_cluster.kill_master, victim)
            failover_s = time.monotonic() - killed_at
            await asyncio.sleep(3.0)  # asks go on against the promoted replica
            stop.set()
            await asyncio.wait_for(asyncio.gather(*agents), timeout=120)
        finally:
            stop.set()
            for task in agents:
                task.cancel()
            await sweeper.aclose()

        # What Redis kept: every published request, with at most one settlement.
        after = outcomes["answered"] - before
        trails = {}
        node = callers.redis
        for request_id in set(published):
            audit = callers.shard_of_request(request_id).keys.audit(request_id)
            trail = await node.lrange(audit, 0, -1)  # type: ignore[misc]
            trails[request_id] = [json.loads(entry)["e"] for entry in trail]
        settled = {"answered", "defaulted", "timed_out", "cancelled", "failed"}
        double = [r for r, events in trails.items() if sum(e in settled for e in events) > 1]
        missing = [r for r, events in trails.items() if not events]
        replies = {r: await callers.settlement(r) for r in answered}
    print(
        f"\nfailover {failover_s:.1f} s; outcomes {dict(outcomes)}; answered after the"
        f" kill {after}; published {len(set(published))}; missing {len(missing)};"
        f" double-settled {len(double)}"
    )
    assert outcomes["hung"] == 0, outcomes
    # In flight at the kill: an ask whose send did not run is sent again (no
    # REDIS_UNAVAILABLE), and one whose answer was lost with the connection is
    # answered: the answer is sent again and its repeat finds it landed, or lands it
    # (it ended NO_ANSWERER: the channel's present failed, it gave its claim back and
    # the last tier ran out).
    assert set(outcomes) <= {"answered"}, outcomes
    assert outcomes["answered"] > 20 * (outcomes.total() - outcomes["answered"]), outcomes
    assert after > 0  # the deployment went on after the failover
    assert double == []
    assert missing == [], missing  # nothing acknowledged was lost with the old master
    for request_id, body in replies.items():  # what each caller got is what Redis kept
        assert body is not None and body.state == "ANSWERED", (request_id, body)
        assert answered[request_id] == YES_JSON


async def test_commands_and_pipelines_ride_through_a_failover_of_the_first_seed(
    own_cluster: Any,
) -> None:
    """The master of the URL's first seed is SIGKILLed: the client's default node,
    where redis-py reads its command table, and the first node it reads the layout
    from. Until its replica has taken over and after, lone commands and pipelines (to
    its slots, to the masters that stayed up, and spanning both) each get their
    result, never an error: what did not run is sent again within
    ASKQ_CLUSTER_RETRY_SECONDS. (A pipeline re-read the layout outside the retry and
    failed at once with `Error 111 connecting to` the dead node; a batch was failed
    whole by one master's refusal, as never sent, while the others had run it; and
    CLUSTERDOWN replies inside a pipeline were handed back as results.) So does a
    connection pinned to that master (a blocking loop's, arq's): it connects to the
    promoted replica, where it failed `Error 111` until then."""
    from askq.redis._connections import command_client, pinned_client
    from askq.redis._wire import NotConnected

    settings = Settings(
        redis_url=own_cluster.url, prefix="fo", cluster_retry_seconds=20.0, socket_timeout=2.0
    )
    victim = own_cluster.ports[0]
    on = {own_cluster.master_of(key_slot(f"k{i}".encode())): f"k{i}" for i in range(200)}
    dead, live = on[victim], next(k for port, k in on.items() if port != victim)
    for key, value in ((dead, "d"), (live, "l")):
        with redis.Redis(port=own_cluster.master_of(key_slot(key.encode()))) as node:
            node.set(key, value)
            assert node.wait(1, 5000) == 1  # on its replica too: the failover keeps it
    client = command_client(None, settings)
    pinned = pinned_client(None, settings.model_copy(update={"prefix": dead}))  # {dead}'s
    problems: list[str] = []
    counts: Counter[str] = Counter()
    done = asyncio.Event()

    def check(what: str, keys: list[str], got: list[Any], lost: list[str]) -> None:
        """A connection lost with a command in flight at the kill (to the dead master)
        is what it is: that command may have run. One batch per loop; nothing else."""
        first = not lost
        for key, result in zip(keys, got, strict=True):
            want = {dead: "d", live: "l"}[key]
            if isinstance(result, BaseException):
                in_flight = key == dead and first and not isinstance(result, NotConnected)
                if in_flight and isinstance(result, redis.ConnectionError):
                    lost.append(f"{what}: {result!r}")
                    continue
                problems.append(f"{what} {key}: {result!r}")
            elif result != want:
                problems.append(f"{what} {key}: {result!r}")
        counts[what] += 1

    async def lone(key: str, conn: Any = client, what: str = "GET") -> None:
        lost: list[str] = []
        while not done.is_set():
            try:
                got: Any = await conn.get(key)
            except Exception as exc:  # noqa: BLE001
                got = exc
                await asyncio.sleep(0.01)
            check(what, [key], [got], lost)

    async def piped(keys: list[str]) -> None:
        lost: list[str] = []
        while not done.is_set():
            try:
                async with client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.get(key)
                    got = await pipe.execute(raise_on_error=False)
            except Exception as exc:  # noqa: BLE001
                got = [exc] * len(keys)
                if isinstance(exc, NotConnected) or not isinstance(exc, redis.ConnectionError):
                    lost.append("raised")  # a whole batch failed: never tolerated
            check("pipeline", keys, got, lost)

    loops = [asyncio.create_task(lone(dead)), asyncio.create_task(lone(live))]
    loops.append(asyncio.create_task(lone(dead, pinned, "pinned GET")))
    shapes = [[live, live], [dead, dead], [live, dead]]
    loops += [asyncio.create_task(piped(keys)) for keys in shapes for _ in range(2)]
    try:
        await asyncio.sleep(0.3)
        before = counts.total()
        # SIGKILL the master of `dead`'s slot (the first seed); back once its replica
        # has taken over, then a while more on the new layout.
        assert await asyncio.to_thread(own_cluster.kill_master, dead) == victim
        await asyncio.sleep(1.0)
    finally:
        done.set()
        await asyncio.wait_for(asyncio.gather(*loops), 30)
        await client.aclose()
        await pinned.aclose()
    assert problems == [], problems[:10]
    assert counts.total() > before  # they went on through the failover
    assert counts["pinned GET"] > 1
