"""`askq health worker|sweeper`, the probe deploy/'s compose healthchecks, Kubernetes
exec probes and systemd notes use: 0 while the process on this host beats in Redis,
NOT_FOUND (10) once its beat has lapsed or it left, REDIS_UNAVAILABLE (11) without
Redis. The replica and the sweeper's beat run in the test; the probe is the real
command in a subprocess."""

from __future__ import annotations

import asyncio
import socket
import sys

from conftest import Backend, running

from askq.answerers.memory import MemoryAnswerer
from askq.sweeping._sweeper_beat import SweeperBeat
from bench._redis_server import free_port


async def probe(backend: Backend, *args: str, url: str | None = None) -> tuple[int, str]:
    env = backend.env()
    if url is not None:
        env["ASKQ_REDIS_URL"] = url
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "askq", "health", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode()


async def test_worker_probe_follows_the_replicas_heartbeat(backend: Backend) -> None:
    async with backend.seam() as seam:
        async with running(seam, MemoryAnswerer(), "desk") as runtime:
            assert runtime.consumer.startswith(socket.gethostname() + "-")  # the default name
            code, text = await probe(backend, "worker", "--group", "desk")
            assert (code, text.split()[0]) == (0, "ok:"), text
            assert runtime.consumer in text
            code, text = await probe(backend, "worker", "--group", "desk", "--consumer", "other")
            assert code == 10 and "NOT_FOUND: no live replica 'other'" in text, text
            code, text = await probe(backend, "worker", "--group", "elsewhere")
            assert code == 10 and "group 'elsewhere'" in text, text
        # stopped: it left the group, so the probe fails at once
        code, text = await probe(backend, "worker", "--group", "desk")
        assert code == 10 and "no live replica on host" in text, text


async def test_sweeper_probe_follows_the_sweepers_heartbeat(backend: Backend) -> None:
    code, text = await probe(backend, "sweeper")
    assert code == 10 and "no sweeper on host" in text, text
    async with backend.seam() as seam:
        beat = SweeperBeat(seam, lambda: 0)
        beat.start()
        try:
            await asyncio.sleep(0.2)  # the first beat
            code, text = await probe(backend, "sweeper")
            assert code == 0 and beat.name in text, text
        finally:
            await beat.stop()
        # a beat left behind (a sweeper killed) counts only within its TTL
        await seam.redis.hset(
            seam.keys.sweepers, f"{socket.gethostname()}:1", '{"beat_ms": 1, "ttl_ms": 1500}'
        )  # type: ignore[misc]
        code, text = await probe(backend, "sweeper")
        assert code == 10, text


async def test_probe_without_redis_is_redis_unavailable(backend: Backend) -> None:
    code, text = await probe(backend, "sweeper", url=f"redis://127.0.0.1:{free_port()}/0")
    assert code == 11 and text.startswith("REDIS_UNAVAILABLE"), text
