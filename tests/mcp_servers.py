"""`askq mcp` processes for the MCP tests: over stdio (the SDK's client launches it)
or over streamable HTTP (a real uvicorn on a free loopback port), against the backend
under test, and an SDK client connected to either, in either protocol era."""

from __future__ import annotations

import asyncio
import contextlib
import select
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from conftest import Backend, _free_port
from mcp import Client, StdioServerParameters

# The eras the SDK speaks: "legacy" negotiates 2025-11-25 through the handshake;
# "2026-07-28" is the stateless era (every request carries its own envelope).
ERAS = ["legacy", "2026-07-28"]
ERA_VERSION = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}
TRANSPORTS = ["stdio", "http"]

# Fast timings: progress every 0.2 s, a dropped call's question kept 1 s for a re-issue.
FAST_MCP = {"ASKQ_MCP_PROGRESS_INTERVAL": "0.2", "ASKQ_MCP_REATTACH_GRACE": "1.0"}


def mcp_env(backend: Backend, **extra: str) -> dict[str, str]:
    return backend.env(**{**FAST_MCP, **extra})


@contextlib.asynccontextmanager
async def http_server(backend: Backend, **extra: str) -> AsyncIterator[str]:
    """`askq mcp --http` on a free port; yields its URL once it says it is ready. The
    waits run in a thread: a test's own replicas beat on this event loop, and a loop
    held for the server's start-up (seconds, on a loaded machine) lets them lapse."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "askq", "mcp", "--http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=mcp_env(backend, **extra),
    )

    def started() -> str:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        assert ready, "askq mcp --http did not start within 30 s"
        line = proc.stderr.readline()
        assert line.endswith(": ready\n"), line + proc.stderr.read()
        return line

    try:
        await asyncio.to_thread(started)
        yield f"http://127.0.0.1:{port}/mcp"
        proc.terminate()
        code = await asyncio.to_thread(proc.wait, 20)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)
        if proc.stderr:
            proc.stderr.close()


@contextlib.asynccontextmanager
async def mcp_client(
    backend: Backend, transport: str, era: str, **kw: Any
) -> AsyncIterator[Client]:
    """An SDK client connected to a fresh `askq mcp` (`kw`: ASKQ_MCP_* settings as
    keyword `env`, and Client options)."""
    env = kw.pop("env", {})
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "askq", "mcp"], env=mcp_env(backend, **env)
        )
        async with Client(params, mode=era, **kw) as client:
            assert client.protocol_version == ERA_VERSION[era]
            yield client
    else:
        async with http_server(backend, **env) as url:
            async with Client(url, mode=era, **kw) as client:
                assert client.protocol_version == ERA_VERSION[era]
                yield client


@contextlib.asynccontextmanager
async def client_factory(
    backend: Backend, transport: str, era: str
) -> AsyncIterator[Callable[[], AbstractAsyncContextManager[Client]]]:
    """Clients of one deployment: over HTTP, connections to one server; over stdio, each
    client with the server it launches (a stdio server serves one connection)."""
    if transport == "stdio":
        yield lambda: mcp_client(backend, "stdio", era)
        return
    async with http_server(backend) as url:
        yield lambda: Client(url, mode=era)
