"""askq as an MCP server (`askq mcp`) and an MCP elicitation bridge, for agents that
speak MCP. Needs the `mcp` extra: `pip install 'askq[mcp]'`. See docs/integrations.md."""

from ._elicitation import ElicitationBridge
from ._server import AskServer, open_server, serve_http, serve_stdio
from ._settings import McpSettings

__all__ = [
    "AskServer",
    "ElicitationBridge",
    "McpSettings",
    "open_server",
    "serve_http",
    "serve_stdio",
]
