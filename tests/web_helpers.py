"""Shared pieces of the web inbox tests: settings, users, a replica whose app is
reached in process (httpx's ASGI transport, on the test's own event loop, where the
group's Redis client lives) and the `web` fixture of one, form helpers."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from askq import AnswererRuntime, Seam
from askq.answerers.web import WebAnswerer, WebSettings, hash_token

SECRET = "test-web-secret-0123456789abcdef"
TOKENS = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789",
    "carol": "carol-token-0123456789",
}
USERS = ",".join(f"{name}={hash_token(token)}" for name, token in TOKENS.items())


def web_settings(**overrides: Any) -> WebSettings:
    values: dict[str, Any] = {"secret": SECRET, "users": USERS, "port": 0}
    values.update(overrides)
    return WebSettings(**values)


@contextlib.asynccontextmanager
async def web_replica(
    seam: Seam,
    *,
    group: str = "web",
    priority: int = 0,
    serve: bool = False,
    consumer: str | None = None,
    remind_after: float | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[AnswererRuntime, WebAnswerer]]:
    """One replica of a web group; `serve`: on a real uvicorn (a free port)."""
    answerer = WebAnswerer(settings=web_settings(**settings), serve=serve)
    runtime = AnswererRuntime(
        seam, answerer, group=group, priority=priority, consumer=consumer, remind_after=remind_after
    )
    task = await runtime.start(timeout=15)
    try:
        yield runtime, answerer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def client_for(answerer: WebAnswerer, host: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=answerer.app, client=(host, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, user: str) -> None:
    page = await client.get("/signin")
    reply = await client.post(
        "/signin", data={"csrf": csrf_of(page.text), "token": TOKENS[user], "next": "/"}
    )
    assert reply.status_code == 303, reply.text


@contextlib.asynccontextmanager
async def signed_in_over_http(
    web: WebAnswerer, user: str = "alice"
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the replica's real server, signed in as `user`."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{web.port}", timeout=10) as client:
        await sign_in(client, user)
        yield client


@pytest.fixture
async def web(seam: Seam) -> AsyncIterator[WebAnswerer]:
    """One replica of the `web` group, its app reached in process."""
    async with web_replica(seam) as (_, answerer):
        yield answerer
