"""What `askq mcp` adds to a question's round trip, against a real redis-server.

    python -m bench.mcp_roundtrip            # 300 calls per row
    python -m bench.mcp_roundtrip --quick    # 30

One `askq worker auto` process answers every question at once (its recommended
option). Rows: the seed question asked directly on a seam (the baseline), then through
`askq mcp` with the `mcp` SDK's client, over stdio and over streamable HTTP (uvicorn),
in each protocol era (2025-11-25 handshake, 2026-07-28 stateless); sequential calls,
median and p99 of the whole call as the agent sees it; beside each, a `tools/list` on
the same connection (no Redis at all): the SDK's own floor. An MCP call costs the SDK's
framing and validation on both sides, and askq mcp's own steps (the reattach record:
a read, an idempotency lookup, a write, and the settlement record after), on top of
the ask itself.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from mcp import Client, StdioServerParameters

from askq import Caller, Seam, Settings
from askq.cli._demo import SEED_QUESTION

from . import _procs, _sequential
from ._common import Latency, new_prefix
from ._redis_server import free_port

ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}


async def timed(n: int, call: Callable[[int], Awaitable[object]]) -> Latency:
    for i in range(min(10, n)):  # warm-up
        await call(-1 - i)
    samples = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - start)
    return Latency.of(samples)


async def run(url: str, n: int) -> None:
    prefix = new_prefix("mcp")
    environ = _procs.env(url, prefix)
    _procs.Child("auto", [*_procs.ASKQ, "worker", "auto"], environ).wait_ready()
    port = free_port()
    _procs.Child(
        "mcp-http", [*_procs.ASKQ, "mcp", "--http", "--port", str(port)], environ
    ).wait_ready()
    rows: list[tuple[str, Latency]] = []
    async with Seam(settings=Settings(redis_url=url, prefix=prefix)) as seam:

        async def direct(i: int) -> object:
            return await seam.ask(SEED_QUESTION, Caller(agent_id="bench", turn_id=f"t{i}"))

        rows.append(("seam.ask (no MCP)", await timed(n, direct)))
    for version, mode in ERAS.items():
        for transport in ("stdio", "http"):
            async with AsyncExitStack() as stack:
                server: StdioServerParameters | str
                if transport == "stdio":
                    server = StdioServerParameters(
                        command=sys.executable, args=["-m", "askq", "mcp"], env=environ
                    )
                else:
                    server = f"http://127.0.0.1:{port}/mcp"
                client = await stack.enter_async_context(Client(server, mode=mode))
                assert client.protocol_version == version

                async def call(
                    i: int, client: Client = client, row: str = transport + version
                ) -> object:
                    # a distinct turn per call: each is a new question, as in a real run
                    meta = {"io.askq/turn": f"{row}-{i}"}
                    result = await client.call_tool("ask_user_question", SEED_QUESTION, meta=meta)
                    assert not result.is_error, result
                    return result

                rows.append((f"askq mcp, {transport}, {version}", await timed(n, call)))

                async def listing(i: int, client: Client = client) -> object:
                    return await client.list_tools(cache_mode="bypass")

                rows.append(("  tools/list (the SDK's floor)", await timed(n, listing)))
    _procs.stop_all()
    await _sequential.wipe_prefix(url, prefix)
    _sequential.report(rows, n, 36, "sequential calls each")


def main() -> None:
    _sequential.main(__doc__, run, n=300, quick=30)


if __name__ == "__main__":
    main()
