"""A receiver of askq's signed webhooks on 127.0.0.1, as a pager, a ticket system or an
in-house bot would run one: every POST verified with the `standardwebhooks` package
(the Standard Webhooks reference library), recorded, and answered with the status the
test asks for (a 500 to be retried, a 410 refused for good, a POST held until released:
a replica dying mid-send). `answer` POSTs an answer back to askq's callback.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from askq.answerers.webhook import WebhookSettings


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    event: dict[str, Any] | None  # the verified payload; None: the signature failed
    status: int  # what the receiver answered

    @property
    def type(self) -> str:
        return str(self.event["type"]) if self.event else ""

    @property
    def data(self) -> dict[str, Any]:
        assert self.event is not None, "not verified"
        data: dict[str, Any] = self.event["data"]
        return data

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Held:
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class Receiver:
    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret or new_secret()
        self.received: list[Received] = []
        self.statuses: list[int] = []  # the next POSTs' statuses, then 200
        self.held: Held | None = None
        # Called with each POST as it is recorded (a bench answers from here at once).
        self.on_receive: Callable[[Received], None] | None = None
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Condition()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/askq"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._on_post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.held is not None:
            self.held.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def hold_next(self) -> Held:
        """The next POST waits (unanswered) until `release` is set."""
        self.held = Held()
        return self.held

    async def _on_post(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            event = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            event = None
        held, self.held = self.held, None
        if held is not None:
            held.reached.set()
            await held.release.wait()
        status = self.statuses.pop(0) if self.statuses else 200
        received = Received(request.path, headers, body, event, status)
        async with self._changed:
            self.received.append(received)
            self._changed.notify_all()
        if self.on_receive is not None:
            self.on_receive(received)
        return web.Response(status=status, text="ok" if status < 300 else "no")

    def of(self, kind: str) -> list[Received]:
        return [r for r in self.received if r.type == kind]

    async def wait_for(
        self, kind: str, n: int = 1, timeout: float = 15, *, distinct: bool = False
    ) -> Received:
        """The n-th POST of `kind` that the receiver took (2xx). `distinct`: the n-th
        message, a retry of one already taken (its webhook-id again: askq delivers at
        least once, a POST slower than ASKQ_WEBHOOK_TIMEOUT is sent again) counted once,
        as the Standard Webhooks spec tells a receiver to."""
        async with asyncio.timeout(timeout), self._changed:
            while True:
                taken = [r for r in self.of(kind) if r.status < 300]
                if distinct:
                    firsts: dict[str, Received] = {}
                    for r in taken:
                        firsts.setdefault(r.id, r)
                    taken = list(firsts.values())
                if len(taken) >= n:
                    return taken[n - 1]
                await self._changed.wait()

    async def settle(self, seconds: float = 0.3) -> None:
        """Let sends in flight land (for asserting that nothing more arrives)."""
        await asyncio.sleep(seconds)


async def answer(
    asked: Received,
    answers: Any,
    *,
    token: str | None = None,
    by: str | None = "alice",
    url: str | None = None,
    client: httpx.AsyncClient | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST an answer to the callback of a `question.asked` event (`client`: one kept
    open, as a bench's; a new client costs its TLS context, ~10 ms)."""
    body: dict[str, Any] = {"answers": answers}
    if by is not None:
        body["by"] = by
    bearer = token if token is not None else asked.data["answer"]["token"]
    async with contextlib.AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(httpx.AsyncClient())
        response = await client.post(
            url or asked.data["answer"]["url"],
            json=body,
            headers={"Authorization": f"Bearer {bearer}"},
        )
    return response.status_code, json.loads(response.text)


def webhook_settings(receiver: Receiver, **extra: Any) -> WebhookSettings:
    values: dict[str, Any] = {
        "url": receiver.url,
        "secret": receiver.secret,
        "http_port": 0,
        "tries": 3,
        "timeout": 5.0,
    }
    values.update(extra)
    return WebhookSettings(**values)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()
