"""Signed single-question links at /a/<token>: GET and HEAD change nothing, POST answers
once as the link's recipient, and every bad token gets its page (403/410)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from conftest import Backend, running
from starlette.applications import Starlette
from test_web_http import CALLER, CONFIRM, NAME, asking
from web_helpers import SECRET, client_for, web, web_replica

from askq import AnswererRuntime, Seam, SignedLinks
from askq.answerers.memory import MemoryAnswerer
from askq.answerers.web import LINK_CSRF_COOKIE, WebAnswerer, links_routes

__all__ = ["web"]  # the fixture, imported so pytest finds it

LINKS = SignedLinks([SECRET])
RECIPIENT = "bob@example.com"


@contextlib.asynccontextmanager
async def asking_group(
    seam: Seam, answerer: MemoryAnswerer
) -> AsyncIterator[tuple[str, asyncio.Task[Any], AnswererRuntime]]:
    """A question held by a group of another kind (`mail`), as the email channel's."""
    async with running(seam, answerer, "mail") as runtime:
        task = asyncio.create_task(seam.ask({"questions": [CONFIRM]}, CALLER))
        offer = await answerer.next_presented()
        try:
            yield offer.request_id, task, runtime
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found.group(1)


async def _open(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.get(f"/a/{token}")


async def test_get_shows_the_choice_preselected_and_changes_nothing(
    seam: Seam, web: WebAnswerer
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        token = LINKS.mint(rid, "web", RECIPIENT, ttl=600, question_id="go", option="No")
        async with client_for(web) as client:  # nobody signed in: the link is the proof
            for _ in range(3):  # a mail scanner prefetching, then the human
                page = await _open(client, token)
                assert page.status_code == 200
                assert re.search(r'value="opt1" checked', page.text)
                assert not re.search(r'value="opt0" checked', page.text)
                assert "Confirm</button>" in page.text and RECIPIENT in page.text
                head = await client.head(f"/a/{token}")
                assert head.status_code == 200 and head.text == ""
            assert page.headers["referrer-policy"] == "no-referrer"
            cookie = page.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie and "path=/a/" in cookie
        assert await web.group.holds(rid) and not task.done()
        assert await web.inbox.link_use(LINKS.check(token, group="web").jti) is None


async def test_post_answers_once_as_the_recipient(seam: Seam, web: WebAnswerer) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        token = LINKS.mint(rid, "web", RECIPIENT, ttl=600, question_id="go", option="No")
        async with client_for(web) as client:
            page = await _open(client, token)
            done = await client.post(f"/a/{token}", data={"csrf": _csrf(page.text), "q0": "opt1"})
            assert done.status_code == 200, done.text
            assert "your answer was recorded" in done.text
            answers = await asyncio.wait_for(task, 5)
            assert answers.to_json() == '{"answers":[{"id":"go","selected":["No"]}]}'
            assert (await seam.settlement(rid)).by == f"link:{RECIPIENT}"  # type: ignore[union-attr]
            # Replayed: refused, nothing changes.
            again = await client.post(f"/a/{token}", data={"csrf": _csrf(page.text), "q0": "opt0"})
            assert again.status_code == 410
            assert "Answered through a link by bob@example.com" in again.text
            reopened = await _open(client, token)
            assert reopened.status_code == 410 and "Already answered" in reopened.text
        assert rid not in [e.id for e in await web.inbox.entries()]


async def test_a_replay_at_another_replica_is_refused(backend: Backend) -> None:
    async with backend.seam() as one, backend.seam() as two:
        async with web_replica(one) as (_, web_a), web_replica(two) as (_, web_b):
            async with asking(one, web_a, CONFIRM) as (rid, task):
                token = LINKS.mint(rid, "web", RECIPIENT, ttl=600)
                async with client_for(web_a) as a, client_for(web_b) as b:
                    page_a, page_b = await _open(a, token), await _open(b, token)
                    replies = await asyncio.gather(
                        a.post(f"/a/{token}", data={"csrf": _csrf(page_a.text), "q0": "opt0"}),
                        b.post(f"/a/{token}", data={"csrf": _csrf(page_b.text), "q0": "opt1"}),
                    )
                    assert sorted(r.status_code for r in replies) == [200, 410]
                    await asyncio.wait_for(task, 5)


async def test_a_short_stored_link_answers_once_at_any_replica(backend: Backend) -> None:
    """A stored link (32 characters; its claims in the group's store) issued at one
    replica is served by another, answers once, and is refused after, anywhere."""
    async with backend.seam() as one, backend.seam() as two:
        async with web_replica(one) as (_, web_a), web_replica(two) as (_, web_b):
            async with asking(one, web_a, CONFIRM) as (rid, task):
                token = await LINKS.issue(
                    web_a.group.store, rid, "web", RECIPIENT, ttl=600, question_id="go", option="No"
                )
                assert len(token) == 32
                async with client_for(web_a) as a, client_for(web_b) as b:
                    page = await _open(b, token)
                    assert page.status_code == 200 and re.search(r'value="opt1" checked', page.text)
                    done = await b.post(
                        f"/a/{token}", data={"csrf": _csrf(page.text), "q0": "opt1"}
                    )
                    assert done.status_code == 200 and "your answer was recorded" in done.text
                    assert (await asyncio.wait_for(task, 5)).answers[0].selected == ["No"]
                    again = await _open(a, token)
                    assert again.status_code == 410
                    assert "Answered through a link by bob@example.com" in again.text
                    guessed = await _open(a, token[:16] + "A" * 16)
                    assert guessed.status_code == 403
                settlement = await one.settlement(rid)
                assert settlement is not None and settlement.by == f"link:{RECIPIENT}"


async def test_the_recipient_answers_the_whole_request(seam: Seam, web: WebAnswerer) -> None:
    async with asking(seam, web, CONFIRM, NAME) as (rid, task):
        token = LINKS.mint(
            rid, "web", RECIPIENT, ttl=600, question_id="go", option="Yes (Recommended)"
        )
        async with client_for(web) as client:
            page = await _open(client, token)
            # An invalid form: said beside the field, and the link is not spent.
            bad = await client.post(f"/a/{token}", data={"csrf": _csrf(page.text), "q0": "opt0"})
            assert bad.status_code == 422
            assert "Write your answer in the box." in bad.text
            good = await client.post(
                f"/a/{token}", data={"csrf": _csrf(page.text), "q0": "opt0", "q1-custom": "askq"}
            )
            assert good.status_code == 200
        assert (await asyncio.wait_for(task, 5)).to_json() == (
            '{"answers":[{"id":"go","selected":["Yes (Recommended)"]},'
            '{"id":"name","selected":[],"custom":"askq"}]}'
        )


async def test_a_post_without_the_link_csrf_cookie_changes_nothing(
    seam: Seam, web: WebAnswerer
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        token = LINKS.mint(rid, "web", RECIPIENT, ttl=600)
        async with client_for(web) as client:
            page = await _open(client, token)
            csrf = _csrf(page.text)
            client.cookies.delete(LINK_CSRF_COOKIE)
            refused = await client.post(f"/a/{token}", data={"csrf": csrf, "q0": "opt0"})
            assert refused.status_code == 403
            await _open(client, token)
            forged = await client.post(f"/a/{token}", data={"csrf": "not-it", "q0": "opt0"})
            assert forged.status_code == 403
        assert await web.group.holds(rid) and not task.done()


@pytest.mark.parametrize(
    ("make", "status", "text"),
    [
        (
            lambda rid: LINKS.mint(rid, "web", RECIPIENT, ttl=60, now=time.time() - 120),
            410,
            "This link has expired",
        ),
        (
            lambda rid: LINKS.mint(rid, "email", RECIPIENT, ttl=600),
            403,
            "It was made for another askq service than the one at this address.",
        ),
        (
            lambda rid: SignedLinks(["another-secret-0123456789"]).mint(
                rid, "web", RECIPIENT, ttl=600
            ),
            403,
            "Part of the link is missing or was changed.",
        ),
        (
            lambda rid: LINKS.mint(rid, "web", RECIPIENT, ttl=600)[:-3] + "abc",
            403,
            "Part of the link is missing or was changed.",
        ),
        (lambda rid: "not-a-token", 403, "Part of the link is missing or was changed."),
        (lambda rid: "A" * 32, 403, "Part of the link is missing or was changed."),  # a guess
    ],
)
async def test_bad_tokens_get_a_page_and_change_nothing(
    seam: Seam, web: WebAnswerer, make: Any, status: int, text: str
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        token = make(rid)
        async with client_for(web) as client:
            for reply in (
                await client.get(f"/a/{token}"),
                await client.post(f"/a/{token}", data={"csrf": "x", "q0": "opt0"}),
            ):
                assert reply.status_code == status
                assert text in reply.text
                # Written for the person who followed the link, not as an exception.
                for developer in ("group", "malformed", "forged", "signature", "issued"):
                    assert developer not in reply.text.lower()
        assert await web.group.holds(rid) and not task.done()


async def test_rotation_old_links_keep_working(seam: Seam) -> None:
    new = "new-web-secret-0123456789abcdef"
    async with web_replica(seam, secret=f"{new},{SECRET}") as (_, web):
        async with asking(seam, web, CONFIRM) as (rid, task):
            old_token = LINKS.mint(rid, "web", RECIPIENT, ttl=600)
            async with client_for(web) as client:
                page = await _open(client, old_token)
                assert page.status_code == 200
                done = await client.post(
                    f"/a/{old_token}", data={"csrf": _csrf(page.text), "q0": "opt0"}
                )
                assert done.status_code == 200
            await asyncio.wait_for(task, 5)


async def test_a_link_to_a_question_answered_elsewhere(seam: Seam) -> None:
    other = MemoryAnswerer(by="console:ops")
    async with web_replica(seam) as (_, web), running(seam, other, "other"):
        async with asking(seam, web, CONFIRM) as (rid, task):
            await other.next_presented()
            token = LINKS.mint(rid, "web", RECIPIENT, ttl=600)
            await other.answer(rid, [{"id": "go", "selected": ["No"]}])
            await asyncio.wait_for(task, 5)
            async with client_for(web) as client:
                page = await _open(client, token)
                assert page.status_code == 410
                assert "Answered in a terminal by ops" in page.text


async def test_links_routes_mount_in_another_channels_app(seam: Seam) -> None:
    """What the email channel does: its own group, its own app, these routes."""
    mail = MemoryAnswerer()
    async with asking_group(seam, mail) as (rid, task, runtime):
        app = Starlette(routes=links_routes(mail.group, LINKS, path="/a", static=True))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mail") as client:
            token = LINKS.mint(rid, runtime.group, "carol@example.com", ttl=600, option="No")
            page = await client.get(f"/a/{token}")
            assert page.status_code == 200 and re.search(r'value="opt1" checked', page.text)
            css = await client.get("/static/app.css")
            assert css.status_code == 200 and "askq" in css.text
            done = await client.post(f"/a/{token}", data={"csrf": _csrf(page.text), "q0": "opt1"})
            assert done.status_code == 200
            assert (await asyncio.wait_for(task, 5)).answers[0].selected == ["No"]
            settlement = await seam.settlement(rid)
            assert settlement is not None and settlement.by == "link:carol@example.com"
            wrong_group = LINKS.mint(rid, "web", "carol@example.com", ttl=600)
            assert (await client.get(f"/a/{wrong_group}")).status_code == 403
