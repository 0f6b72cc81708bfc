"""How the shipped channels' HTTP endpoints listen (the Slack interactivity endpoint,
the email group's endpoint, the web inbox; `Endpoint`: the Teams, Discord and webhook
endpoints' shared start and stop).

The socket is bound and listening before the server takes it, so a port in use is a
CONFIG_ERROR naming the settings at start-up, not an error inside the server's task
(with SO_REUSEADDR, Linux lets two sockets bind one port; only `listen` refuses).
uvicorn is imported when a server starts: the Slack extra does not install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, ClassVar

from askq import AskError, ErrorCode

if TYPE_CHECKING:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp

HEALTH_PATH = "/healthz"


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


class Endpoint:
    """A channel's HTTP endpoint: its POST route (`_on_post`) and `GET /healthz`, on
    host:port from `start` to `stop`. Starlette is imported when it starts, as uvicorn."""

    log: ClassVar[logging.Logger]  # the channel's own logger
    path: ClassVar[str]  # the POST route
    settings: ClassVar[str]  # where host and port came from: "ASKQ_X_HTTP_HOST/ASKQ_X_HTTP_PORT"
    title: ClassVar[str]  # "Discord interactions endpoint": its log line and errors
    logs_path: ClassVar[bool] = True  # whether the log line ends with the route

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._server: AppServer | None = None
        self.port: int | None = None  # the bound port (useful with port 0)

    async def start(self) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        app = Starlette(
            routes=[
                Route(self.path, self._on_post, methods=["POST"]),
                Route(HEALTH_PATH, self._on_health, methods=["GET"]),
            ]
        )
        sock = listening_socket(self._host, self._port, self.settings)
        self.port = int(sock.getsockname()[1])
        self._server = AppServer(app, sock, f"the {self.title}")
        await self._server.start()
        path = self.path if self.logs_path else ""
        self.log.info("%s on http://%s:%d%s", self.title, self._host, self.port, path)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
            self._server = None

    async def _on_post(self, request: Request) -> Response:
        raise NotImplementedError

    async def _on_health(self, request: Request) -> Response:
        from starlette.responses import PlainTextResponse

        return PlainTextResponse("ok")
