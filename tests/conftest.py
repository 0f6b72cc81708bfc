"""Every test runs twice: against fakeredis (speed) and the real Redis server (truth).
Tests marked `cluster` (routing, scripts, streams, arq) run a third time against a
Redis Cluster the session starts (three masters, three replicas on loopback:
`bench/_redis_cluster.py`), once with one shard ("cluster") and once with
`ASKQ_SHARDS=3` ("cluster-3"): the deployment's shape is the `backend` parameter. A
shape named `<server>-<n>` is that server with n shards.

fakeredis is served over TCP (TcpFakeServer, in a thread) so worker subprocesses can
reach it too; each test gets its own key prefix, so tests never see each other's keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from askq import Answerer, AnswererRuntime, Seam, Settings
from askq.cli._demo import SEED_QUESTION

REAL_URL = os.environ.get("ASKQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ROOT = Path(__file__).resolve().parent.parent

# ASKQ_TEST_SHARDS=3 runs the fake and real shapes with 3 shards (any test file, e.g.
# a channel's, checked against a sharded deployment).
DEFAULT_SHARDS = int(os.environ.get("ASKQ_TEST_SHARDS", "1"))

# Short timings so liveness and recovery tests finish in seconds.
FAST = {"consumer_ttl": 1.5, "agent_ttl": 1.5, "block_seconds": 2.0}


@dataclass
class Backend:
    name: str
    url: str
    prefix: str
    shards: int = 1

    def settings(self, **overrides: Any) -> Settings:
        return Settings(
            redis_url=self.url,
            prefix=self.prefix,
            **{**FAST, "shards": self.shards, **overrides},
        )

    def seam(self, **overrides: Any) -> Seam:
        return Seam(settings=self.settings(**overrides))

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for an askq subprocess talking to this backend."""
        env = dict(os.environ)
        env.update(
            ASKQ_REDIS_URL=self.url,
            ASKQ_PREFIX=self.prefix,
            ASKQ_CONSUMER_TTL=str(FAST["consumer_ttl"]),
            ASKQ_AGENT_TTL=str(FAST["agent_ttl"]),
            ASKQ_BLOCK_SECONDS=str(FAST["block_seconds"]),
            ASKQ_SHARDS=str(self.shards),
            PYTHONPATH=str(ROOT),
        )
        env.update(extra)
        return env

    @property
    def cluster(self) -> bool:
        return self.url.startswith("redis+cluster://")

    def sync_client(self) -> Any:
        """A plain client, or on a cluster the one of the master holding the prefix's
        slot (every key of a deployment is there)."""
        if self.cluster:
            return cluster_node_client(self.url, self.prefix)
        return redis.Redis.from_url(self.url, decode_responses=True)

    def keys(self) -> list[str]:
        """Every key of the deployment: under `{prefix}` and each shard's tag, on
        every master."""
        found: list[str] = []
        for client in self.all_clients():
            try:
                for pattern in self.patterns:
                    found += client.scan_iter(match=pattern, count=1000)
            finally:
                client.close()
        return sorted(set(found))

    @property
    def patterns(self) -> list[str]:
        return ["{" + self.prefix + "}:*", "{" + self.prefix + "~*}:*"]

    def all_clients(self) -> list[Any]:
        """A plain client per master (one for a single Redis)."""
        if not self.cluster:
            return [redis.Redis.from_url(self.url, decode_responses=True)]
        return cluster_masters(self.url)


def cluster_masters(url: str) -> list[redis.Redis]:
    seed = url.removeprefix("redis+cluster://").split(",")[0]
    host, _, port = seed.rpartition(":")
    with redis.Redis(host=host, port=int(port), decode_responses=True) as client:
        masters = {(m[0], int(m[1])) for _, _, m, *_ in client.execute_command("CLUSTER", "SLOTS")}
    return [redis.Redis(host=h, port=p, decode_responses=True) for h, p in sorted(masters)]


def cluster_node_client(url: str, tag: str) -> redis.Redis:
    from redis.crc import key_slot

    slot = key_slot(("{" + tag + "}").encode())
    seed = url.removeprefix("redis+cluster://").split(",")[0]
    host, _, port = seed.rpartition(":")
    with redis.Redis(host=host, port=int(port), decode_responses=True) as client:
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return redis.Redis(host=master[0], port=int(master[1]), decode_responses=True)
    raise RuntimeError(f"no master owns slot {slot}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fakeredis_info() -> None:
    """fakeredis has no INFO; arq's worker logs the server's INFO at start-up and
    nothing else. Give fakeredis a minimal one so arq runs on it as on Redis (the
    product never reads INFO)."""
    from fakeredis._commands import command
    from fakeredis._socket._fakesocket import FakeSocket

    def info(self: Any, *sections: bytes) -> bytes:
        return b"# Server\r\nredis_version:7.0.0\r\n"

    if not hasattr(FakeSocket, "info"):
        FakeSocket.info = command((), (bytes,), name="info")(info)


@pytest.fixture(autouse=True)
def scripts_touch_only_declared_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every script run in a test checks each key it touches was declared
    (tests/script_checks.py): a script that reaches for another key fails the test."""
    from script_checks import checked

    monkeypatch.setattr("askq.redis._script_runner.load", checked)


@pytest.fixture(scope="session")
def fake_url() -> Iterator[str]:
    from fakeredis import TcpFakeServer

    _fakeredis_info()

    port = _free_port()
    server = TcpFakeServer(("127.0.0.1", port), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{port}/0"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def real_url() -> str:
    client = redis.Redis.from_url(REAL_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # CI starts one; a developer may not have
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no real Redis at {REAL_URL}: {exc}")
    finally:
        client.close()
    return REAL_URL


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    """A Redis Cluster for the session (three masters, three replicas), if this machine
    has redis-server and redis-cli (CI installs them)."""
    from bench._redis_cluster import RedisCluster

    try:
        cluster = RedisCluster().start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Redis Cluster: {exc}")
    try:
        yield cluster.url
    finally:
        cluster.stop()


CLUSTER_SHAPES = ("cluster", "cluster-3")


def make_backend(request: pytest.FixtureRequest, shape: str) -> Backend:
    """The backend of shape `shape` ("real", "cluster-3": a cluster with 3 shards)."""
    server, _, shards = shape.partition("-")
    url = request.getfixturevalue(f"{server}_url")
    return Backend(server, url, f"t{uuid.uuid4().hex[:12]}", int(shards or DEFAULT_SHARDS))


def drop_keys(b: Backend) -> None:
    for client in b.all_clients():
        try:
            for pattern in b.patterns:
                keys = list(client.scan_iter(match=pattern, count=1000))
                with client.pipeline(transaction=False) as pipe:
                    for key in keys:  # key by key: one slot per DEL on a cluster
                        pipe.delete(key)
                    pipe.execute()
        finally:
            client.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cluster shapes of `backend` run only for tests marked `cluster`; for the
    others they are deselected (not skipped).

    The suite runs in parallel (pytest-xdist, `--dist loadgroup` in pyproject.toml):
    its tests mostly wait on timers and other processes, not on the CPU. Each test has
    its own key prefix, so tests on one server never see each other's keys. What runs
    on the session's Redis Cluster goes to one worker (the `xdist_group` "cluster"), so
    the session starts one cluster, not one per worker."""
    keep, drop = [], []
    for item in items:
        shape = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
        if shape in CLUSTER_SHAPES and item.get_closest_marker("cluster") is None:
            drop.append(item)
            continue
        if shape in CLUSTER_SHAPES or "cluster_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("cluster"))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=["fake", "real", *CLUSTER_SHAPES])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    b = make_backend(request, request.param)
    yield b
    drop_keys(b)


@pytest.fixture
async def seam(backend: Backend) -> AsyncIterator[Seam]:
    async with backend.seam() as s:
        yield s


PYTHON = sys.executable


@contextlib.asynccontextmanager
async def running(
    seam: Seam,
    answerer: Answerer,
    group: str,
    priority: int = 0,
    scope: dict[str, str] | None = None,
    consumer: str | None = None,
    **timing: float | None,
) -> AsyncIterator[AnswererRuntime]:
    """Run one replica of a group for the duration of the block (`timing`:
    decision_window, escalate_after, remind_after)."""
    runtime = AnswererRuntime(
        seam, answerer, group=group, priority=priority, scope=scope, consumer=consumer, **timing
    )
    task = await runtime.start(timeout=15)
    try:
        yield runtime
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def sweeping(backend: Backend, **overrides: Any) -> AsyncIterator[Any]:
    """Run a sweeper's timer loop (its own seam) for the duration of the block."""
    from askq.sweeping._sweeper import Sweeper

    async with backend.seam(**overrides) as seam:
        sweeper = Sweeper(seam)
        sweeper.start()
        try:
            yield sweeper
        finally:
            await sweeper.aclose()


SEED = SEED_QUESTION  # the seed's example call
YES = [{"id": "cleanup", "selected": ["Yes, delete them (Recommended)"]}]
NO = [{"id": "cleanup", "selected": ["No, keep them"]}]
YES_JSON = '{"answers":[{"id":"cleanup","selected":["Yes, delete them (Recommended)"]}]}'
NO_JSON = '{"answers":[{"id":"cleanup","selected":["No, keep them"]}]}'
