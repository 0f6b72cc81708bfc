"""Live updates over Server-Sent Events through a real uvicorn (an in-process transport
buffers a stream): offers appear, settled questions leave with their reason, reminders
highlight, and a page at one replica hears what another replica was offered."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from conftest import Backend, running, sweeping
from test_web_http import CALLER, CONFIRM, NAME
from web_helpers import csrf_of, web_replica
from web_helpers import signed_in_over_http as signed_in

from askq import AskError, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer


class Events:
    """The events of one open stream, as they arrive."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self, timeout: float = 5.0) -> tuple[str, dict[str, Any]]:
        return await asyncio.wait_for(self._next(), timeout)

    async def _next(self) -> tuple[str, dict[str, Any]]:
        event, data = "message", ""
        async for line in self._lines:
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif line == "" and data:
                return event, json.loads(data)
            elif line == "":
                event = "message"  # a ping (a comment line) ends here
        raise AssertionError("the stream ended")

    async def until(self, kind: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            event, data = await self.next(max(left, 0.01))
            if event == kind:
                return data


@contextlib.asynccontextmanager
async def stream(client: httpx.AsyncClient, path: str = "/events") -> AsyncIterator[Events]:
    async with client.stream("GET", path) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Events(response)


async def test_offers_appear_and_answers_elsewhere_leave_with_the_reason(seam: Seam) -> None:
    other = MemoryAnswerer(by="slack:U0BOB")
    async with web_replica(seam, serve=True) as (_, web), running(seam, other, "other"):
        async with signed_in(web) as client, stream(client) as events:
            snapshot = await events.until("snapshot")
            assert snapshot["count"] == 0
            task = asyncio.create_task(seam.ask({"questions": [CONFIRM]}, CALLER))
            offer = await events.until("offer")
            assert "Deploy now?" in offer["html"] and f'id="req-{offer["id"]}"' in offer["html"]
            await other.next_presented()
            await other.answer(offer["id"], [{"id": "go", "selected": ["No"]}])
            gone = await events.until("gone")
            assert gone == {"id": offer["id"], "reason": "answered in Slack by U0BOB"}
            await task


async def test_a_page_at_one_replica_hears_what_another_was_offered(backend: Backend) -> None:
    async with backend.seam() as one, backend.seam() as two:
        async with (
            web_replica(one, serve=True) as (_, web_a),
            web_replica(two, serve=True) as (
                _,
                web_b,
            ),
        ):
            async with signed_in(web_a) as a, signed_in(web_b, "bob") as b:
                async with stream(a) as events_a, stream(b) as events_b:
                    await events_a.until("snapshot")
                    await events_b.until("snapshot")
                    task = asyncio.create_task(one.ask({"questions": [NAME]}, CALLER))
                    offer_a = await events_a.until("offer")
                    offer_b = await events_b.until("offer")
                    assert offer_a["id"] == offer_b["id"]
                    # Bob answers at replica B; both pages see it leave.
                    rid = offer_b["id"]
                    page = await b.get(f"/q/{rid}")
                    await b.post(f"/q/{rid}", data={"csrf": csrf_of(page.text), "q0-custom": "x"})
                    assert (await events_a.until("gone"))[
                        "reason"
                    ] == "answered in the web inbox by bob"
                    assert (await events_b.until("gone"))["id"] == rid
                    assert (
                        await task
                    ).to_json() == '{"answers":[{"id":"name","selected":[],"custom":"x"}]}'


async def test_a_reminder_highlights_and_a_cancel_leaves(backend: Backend, seam: Seam) -> None:
    async with sweeping(backend), web_replica(seam, serve=True, remind_after=0.3) as (_, web):
        async with signed_in(web) as client, stream(client) as events:
            await events.until("snapshot")
            ask = asyncio.create_task(seam.ask({"questions": [CONFIRM]}, CALLER))
            offer = await events.until("offer")
            reminded = await events.until("remind")
            assert reminded["id"] == offer["id"]
            page = await client.get("/")
            assert 'class="item reminded"' in page.text
            await seam.abort_turn(CALLER.turn_id)
            gone = await events.until("gone")
            assert gone == {"id": offer["id"], "reason": "cancelled: the turn was aborted"}
            with pytest.raises(AskError):
                await ask


async def test_streams_respect_allowlists_and_filters(seam: Seam) -> None:
    routes = json.dumps({"tenant=acme": ["alice"], "*": "*"})
    async with web_replica(seam, serve=True, routes=routes) as (_, web):
        async with signed_in(web) as alice, signed_in(web, "bob") as bob:
            async with (
                stream(bob) as bob_events,
                stream(alice, "/events?scope=tenant%3Dbeta") as beta,
            ):
                await bob_events.until("snapshot")
                await beta.until("snapshot")
                secret = asyncio.create_task(
                    seam.ask({"questions": [CONFIRM]}, CALLER, scope={"tenant": "acme"})
                )
                public = asyncio.create_task(
                    seam.ask({"questions": [NAME]}, CALLER, scope={"tenant": "beta"})
                )
                # Bob hears only the beta question; alice's beta-filtered page too.
                assert "What is it called?" in (await bob_events.until("offer"))["html"]
                assert "What is it called?" in (await beta.until("offer"))["html"]
                with pytest.raises(asyncio.TimeoutError):
                    await bob_events.until("offer", timeout=0.5)
                for task in (secret, public):
                    task.cancel()


async def test_a_port_in_use_is_a_config_error(seam: Seam) -> None:
    async with web_replica(seam, serve=True) as (_, web):
        with pytest.raises(AskError) as caught:
            async with web_replica(seam, serve=True, port=web.port):
                pass
        assert caught.value.code is ErrorCode.CONFIG_ERROR
        assert f"cannot listen on 127.0.0.1:{web.port}" in caught.value.message


async def test_an_answer_pages_stream_carries_its_request_alone(seam: Seam) -> None:
    other = MemoryAnswerer(by="console:ops")
    async with web_replica(seam, serve=True) as (_, web), running(seam, other, "other"):
        async with signed_in(web) as client, stream(client) as inbox:
            await inbox.until("snapshot")
            first = asyncio.create_task(seam.ask({"questions": [CONFIRM]}, CALLER))
            rid = (await inbox.until("offer"))["id"]
            page = await client.get(f"/q/{rid}")
            assert f'data-stream="/events?request={rid}"' in page.text
            async with stream(client, f"/events?request={rid}") as watching:
                assert (await watching.until("snapshot"))["count"] == 0
                second = asyncio.create_task(seam.ask({"questions": [NAME]}, CALLER))
                assert (await inbox.until("offer"))["id"] != rid
                await other.next_presented()
                await other.next_presented()
                await other.answer(rid, [{"id": "go", "selected": ["No"]}])
                # The next event is this request's: the other question's offer never came.
                assert await watching.next() == (
                    "gone",
                    {"id": rid, "reason": "answered in a terminal by ops"},
                )
                second.cancel()
            await first
