"""An MCP client in a process of its own, for tests that kill it: the `mcp` SDK's client
launches `askq mcp` over stdio (in a session of its own, as the SDK does, so the
server outlives a client killed with SIGKILL and sees its stdin close), calls
`ask_user_question` once and prints the result as one JSON line.

argv: era ("legacy" or "2026-07-28"), the arguments (JSON), the call's `_meta` (JSON),
and a file the server's shell writes the server's pid to before it becomes the server.
The askq settings come from this process's environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters


async def main() -> None:
    era, arguments, meta, pid_file = sys.argv[1:5]
    server = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'echo $$ > "$0"; exec "$1" -m askq mcp', pid_file, sys.executable],
        env=dict(os.environ),
    )
    async with Client(server, mode=era) as client:
        result = await client.call_tool(
            "ask_user_question", json.loads(arguments), meta=json.loads(meta)
        )
        (block,) = result.content
        print(json.dumps({"is_error": result.is_error, "text": block.text}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
