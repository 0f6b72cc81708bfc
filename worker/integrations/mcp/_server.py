"""`askq mcp`: askq's `ask_user_question` as an MCP server (the `mcp` SDK's low-level
`Server`), over stdio or streamable HTTP, for both protocol eras the SDK speaks
(2025-11-25 with its handshake, 2026-07-28 stateless).

The tool is the core's `AskUserQuestionTool`, unchanged: the same input schema
(`askq.input_schema()`), the same compact JSON, its errors (`NO_ANSWERER`,
`DELEGATED_CALLER`, `INVALID_REQUEST`, ...) as tool results with `isError` the model
reads. How a call waits is `_blocking.py`; handle mode is `_handles.py`; who asks is
`_identity.py`.

Nothing a retried call needs lives in one process: reattachment and handles go through
Redis, and the server uses no server-to-client requests (so no sealed MRTR
`requestState` whose key would be per-process). Behind a load balancer, 2026-era calls
may land on any replica; 2025-era HTTP sessions are per process in the SDK (route a
session to one replica).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib.metadata import version
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from askq import (
    AskError,
    AskUserQuestionTool,
    ChannelStore,
    Seam,
    Settings,
    ToolResult,
    input_schema,
)

from ._blocking import BlockingCalls
from ._handles import GET_DESCRIPTION, GET_INPUT_SCHEMA, GET_TOOL_NAME, HANDLE_NOTE, Handles
from ._identity import identify
from ._settings import McpSettings

log = logging.getLogger("askq.mcp")

STOP_WAIT = 2.0  # seconds the stdio loop gets to stop before the withdrawals go ahead
PROGRESS_MESSAGE = "waiting for a human to answer"
INSTRUCTIONS = (
    "ask_user_question asks a human (in a terminal, Slack, email or the web, whichever"
    " reaches them first) and returns their answers as JSON."
)


def _explicitly_cancelled(ctx: ServerRequestContext[Any, Any]) -> Callable[[], bool]:
    """Whether the client sent notifications/cancelled for this call (the dispatcher
    sets the event before it cancels the handler); a dropped stream does not set it.
    The SDK keeps the event on the session's request channel; if a later SDK moves it,
    every cancellation counts as a drop (withdrawn after the grace period)."""

    def check() -> bool:
        channel = getattr(ctx.session, "_request_outbound", None)
        event = getattr(channel, "cancel_requested", None)
        return bool(event is not None and event.is_set())

    return check


def _result(result: ToolResult) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=result.content)], is_error=result.is_error
    )


class AskServer:
    """The MCP server over one open seam. `server` is the SDK's `Server`; `aclose()`
    settles what the calls left when the server stops."""

    def __init__(self, seam: Seam, settings: McpSettings | None = None) -> None:
        self.settings = settings or McpSettings.from_env()
        self.seam = seam
        self.tool = AskUserQuestionTool(seam, scope=self.settings.scope_labels)
        store = ChannelStore(seam.single_node, seam.keys.base, "mcp", seam.settings)
        self.blocking = BlockingCalls(self.tool, store, self.settings)
        self.handles = Handles(self.tool, self.settings) if self.settings.handle_mode else None
        # A stdio server process serves one connection: it is the session.
        self.stdio_session = f"mcp-stdio-{uuid.uuid4().hex}"
        self.server: Server[Any] = Server(
            "askq",
            version=version("askq"),
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def tools(self) -> list[types.Tool]:
        description = self.tool.description + (HANDLE_NOTE if self.handles else "")
        tools = [
            types.Tool(name=self.tool.name, description=description, input_schema=input_schema())
        ]
        if self.handles:
            tools.append(
                types.Tool(
                    name=GET_TOOL_NAME, description=GET_DESCRIPTION, input_schema=GET_INPUT_SCHEMA
                )
            )
        return tools

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools())

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args: dict[str, Any] = params.arguments or {}
        if self.handles and params.name == GET_TOOL_NAME:
            return _result(await self.handles.get(args))
        if params.name != self.tool.name:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool: {params.name}")
        try:
            who = identify(self.settings, ctx.meta, ctx.request, self.stdio_session)
        except AskError as exc:
            return _result(ToolResult(content=str(exc), is_error=True, code=exc.code))
        if self.handles:
            return _result(await self.handles.ask(who, args))

        async def report(sent: int) -> None:
            await ctx.session.report_progress(float(sent), None, PROGRESS_MESSAGE)

        return _result(await self.blocking.call(who, args, report, _explicitly_cancelled(ctx)))

    async def aclose(self) -> None:
        await self.blocking.aclose()
        if self.handles:
            self.handles.aclose()


@asynccontextmanager
async def open_server(
    settings: Settings | None = None, mcp_settings: McpSettings | None = None
) -> AsyncIterator[AskServer]:
    """A seam, the asking agent kept live (with its owner), and the server over them."""
    mcp_settings = mcp_settings or McpSettings.from_env()
    async with Seam(settings=settings or Settings()) as seam:
        async with seam.agent(mcp_settings.agent_id, mcp_settings.owner):
            server = AskServer(seam, mcp_settings)
            try:
                yield server
            finally:
                await server.aclose()


async def serve_stdio(settings: Settings, mcp_settings: McpSettings) -> bool:
    """Serve one client over stdin/stdout. False when stopped by a signal while stdin
    was still open: the thread reading it then keeps the interpreter from exiting, so
    the caller should end the process itself once this returns (all is settled)."""
    from mcp.server.stdio import stdio_server

    from askq.answering._runtime import stop_on_signals

    async with open_server(settings, mcp_settings) as server:

        async def serve() -> None:
            async with stdio_server() as (read, write):
                options = server.server.create_initialization_options()
                await server.server.run(read, write, options)

        # Until the client closes stdin (it exited, or was killed), or SIGINT/SIGTERM.
        # A client that went away dropped its calls: as over HTTP, each keeps its
        # question for the reattach grace, for the client restarted (with a server of
        # its own) to re-issue, before it is withdrawn; a signal withdraws at once.
        serving = asyncio.ensure_future(serve())
        stop = stop_on_signals()
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            await server.blocking.wait_out_grace(stop)
        stopping.cancel()
        serving.cancel()
        # Bounded: the SDK reads stdin in a thread, which lets go only at a line or EOF.
        await asyncio.wait({serving}, timeout=STOP_WAIT)
    return serving.done()


def _web_server() -> type[Any]:
    import uvicorn

    class Web(uvicorn.Server):
        """uvicorn, minus re-raising SIGTERM/SIGINT once it has stopped: the server still
        has its own cleanup to do (withdrawing what its calls left), then exits 0."""

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()

    return Web


async def serve_http(
    settings: Settings,
    mcp_settings: McpSettings,
    host: str,
    port: int,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    import uvicorn

    _Web = _web_server()
    async with open_server(settings, mcp_settings) as server:
        app = server.server.streamable_http_app(host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        web = _Web(config)

        async def announce() -> None:
            while not web.started:
                await asyncio.sleep(0.02)
            if on_ready is not None:
                on_ready(f"http://{host}:{port}/mcp")

        announcing = asyncio.ensure_future(announce())
        try:
            await web.serve()
        finally:
            announcing.cancel()
