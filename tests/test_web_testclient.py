"""The web inbox through Starlette's own TestClient. The TestClient runs the app on an
event loop of its own (a portal thread), so the replica — its seam, its Redis clients,
its runtime — is started on that loop too. (The other HTTP tests use httpx's ASGI
transport on the test's loop, which lets them await the seam directly.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from conftest import Backend
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send
from test_web_http import CALLER, CONFIRM
from web_helpers import SECRET, TOKENS, csrf_of, web_settings

from askq import AnswererRuntime, Answers, Seam, SignedLinks
from askq.answerers.web import WebAnswerer


class LateApp:
    """An ASGI app that serves the replica's app once the replica has started (it is
    built by the answerer's `start`, inside the portal)."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        await self.app(scope, receive, send)


class Site:
    def __init__(self, client: TestClient, seam: Seam, web: WebAnswerer) -> None:
        self.client = client
        self.seam = seam
        self.web = web

    def ask(self, *questions: dict[str, Any]) -> tuple[str, Future[Answers]]:
        portal = self.client.portal
        assert portal is not None
        known = {e.id for e in portal.call(self.web.inbox.entries)}
        future = portal.start_task_soon(self.seam.ask, {"questions": list(questions)}, CALLER)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            fresh = [e.id for e in portal.call(self.web.inbox.entries) if e.id not in known]
            if fresh:
                return fresh[0], future
            time.sleep(0.02)
        raise AssertionError("the question never reached the inbox")

    def sign_in(self, user: str) -> None:
        page = self.client.get("/signin")
        reply = self.client.post(
            "/signin",
            data={"csrf": csrf_of(page.text), "token": TOKENS[user], "next": "/"},
            follow_redirects=False,
        )
        assert reply.status_code == 303


@pytest.fixture
def site(backend: Backend) -> Iterator[Site]:
    late = LateApp()
    with TestClient(late) as client:
        portal = client.portal
        assert portal is not None

        async def start() -> tuple[Seam, WebAnswerer, Any]:
            seam = backend.seam()
            await seam.__aenter__()
            web = WebAnswerer(settings=web_settings(), serve=False)
            task = await AnswererRuntime(seam, web, group="web").start(timeout=15)
            late.app = web.app
            return seam, web, task

        seam, web, task = portal.call(start)
        try:
            yield Site(client, seam, web)
        finally:

            async def stop() -> None:
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001 - the cancellation itself
                    pass
                await seam.aclose()

            portal.call(stop)


def test_sign_in_and_answer(site: Site) -> None:
    assert site.client.get("/", follow_redirects=False).status_code == 303
    site.sign_in("alice")
    rid, answer = site.ask(CONFIRM)
    inbox = site.client.get("/")
    assert f'id="req-{rid}"' in inbox.text and "Deploy now?" in inbox.text
    page = site.client.get(f"/q/{rid}")
    refused = site.client.post(f"/q/{rid}", data={"q0": "opt1"})
    assert refused.status_code == 403 and not answer.done()
    invalid = site.client.post(f"/q/{rid}", data={"csrf": csrf_of(page.text)})
    assert invalid.status_code == 422
    assert "Choose one of the options, or choose Other… and write your own answer." in invalid.text
    done = site.client.post(f"/q/{rid}", data={"csrf": csrf_of(page.text), "q0": "opt1"})
    assert done.status_code == 200 and "Answered in the web inbox by alice" in done.text
    assert answer.result(5).to_json() == '{"answers":[{"id":"go","selected":["No"]}]}'


def test_a_signed_link_answers_once(site: Site) -> None:
    rid, answer = site.ask(CONFIRM)
    token = SignedLinks([SECRET]).mint(rid, "web", "bob@example.com", ttl=600, option="No")
    assert site.client.head(f"/a/{token}").status_code == 200
    page = site.client.get(f"/a/{token}")
    assert 'value="opt1" checked' in page.text and not answer.done()
    done = site.client.post(f"/a/{token}", data={"csrf": csrf_of(page.text), "q0": "opt1"})
    assert done.status_code == 200
    assert answer.result(5).to_json() == '{"answers":[{"id":"go","selected":["No"]}]}'
    again = site.client.post(f"/a/{token}", data={"csrf": csrf_of(page.text), "q0": "opt0"})
    assert again.status_code == 410
    assert "Answered through a link by bob@example.com" in again.text
