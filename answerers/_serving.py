"""How the shipped channels' HTTP endpoints listen (the Slack interactivity endpoint,
the email group's endpoint, the web inbox).

The socket is bound and listening before the server takes it, so a port in use is a
CONFIG_ERROR naming the settings at start-up, not an error inside the server's task
(with SO_REUSEADDR, Linux lets two sockets bind one port; only `listen` refuses).
uvicorn is imported when a server starts: the Slack extra does not install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING

from askq import AskError, ErrorCode

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp


def listening_socket(host: str, port: int, settings: str) -> socket.socket:
    """A TCP socket listening on host:port (0: any free port); `settings` names the
    variables they came from (`ASKQ_X_HOST/ASKQ_X_PORT`) in the CONFIG_ERROR."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"{settings}: cannot listen on {host}:{port} ({exc.strerror or exc})",
        ) from None
    sock.setblocking(False)
    return sock


class AppServer:
    """uvicorn serving an ASGI app on a listening socket, from `start` to `stop`."""

    def __init__(self, app: ASGIApp, sock: socket.socket, name: str) -> None:
        self.app = app
        self.sock = sock
        self.name = name  # "the web server": what a failed start-up says stopped
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Returns once uvicorn serves; its own error, or a CONFIG_ERROR, if it stopped
        before that."""
        import uvicorn

        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # the peer address is what trusted-proxy checks read
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._serving = asyncio.create_task(self._server.serve(sockets=[self.sock]))
        while not self._server.started:  # start-up only: uvicorn has no event for it
            if self._serving.done():
                self._serving.result()
                raise AskError(ErrorCode.CONFIG_ERROR, f"{self.name} stopped at start-up")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop serving (open streams are the caller's to end first); bounded."""
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._serving, timeout=5)
        self._server = None
        self._serving = None
