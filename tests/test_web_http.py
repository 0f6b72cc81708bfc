"""The web inbox over HTTP (in process, on the test's event loop), against fakeredis and
real Redis: sign-in both ways, CSRF, allowlists, every form path and validation
message, late answers, several replicas as one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from html import unescape
from typing import Any

import httpx
import pytest
from conftest import SEED, YES_JSON, Backend, running
from web_helpers import TOKENS, client_for, csrf_of, sign_in, web, web_replica

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.answerers.web import WebAnswerer

__all__ = ["web"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")

CONFIRM: dict[str, Any] = {
    "id": "go",
    "header": "Confirm",
    "question": "Deploy now?",
    "options": [
        {"label": "Yes (Recommended)", "description": "Ship it."},
        {"label": "No", "description": "Wait."},
    ],
}
LANGS: dict[str, Any] = {
    "id": "langs",
    "header": "Languages",
    "question": "Which languages?",
    "multiSelect": True,
    "options": [{"label": "Python"}, {"label": "Go"}, {"label": "Rust"}],
}
NAME: dict[str, Any] = {"id": "name", "header": "Name", "question": "What is it called?"}
HOSTILE: dict[str, Any] = {
    "id": "x",
    "header": "<b>bold</b>",
    "question": '<script>alert("q")</script> & <img src=x onerror=alert(1)>',
    "options": [{"label": "<i>yes</i>", "description": "<a href='http://evil'>d</a>"}],
}


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def asking(
    seam: Seam, web: WebAnswerer, *questions: dict[str, Any], scope: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, asyncio.Task[Any]]]:
    """Ask in the background; yield (request id, the ask's task) once the inbox lists it."""
    known = {e.id for e in await web.inbox.entries()}
    task = asyncio.create_task(seam.ask({"questions": list(questions)}, CALLER, scope=scope or {}))
    found: list[str] = []

    async def listed() -> bool:
        if task.done():
            task.result()
        found[:] = [e.id for e in await web.inbox.entries() if e.id not in known]
        return bool(found)

    await eventually(listed)
    try:
        yield found[0], task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, AskError):
                await task


@pytest.fixture
async def alice(web: WebAnswerer) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(web) as client:
        await sign_in(client, "alice")
        yield client


# --- sign-in -------------------------------------------------------------------------------


async def test_pages_need_a_signed_in_user(web: WebAnswerer) -> None:
    async with client_for(web) as client:
        reply = await client.get("/q/whatever?x=1")
        assert reply.status_code == 303
        assert reply.headers["location"] == "/signin?next=%2Fq%2Fwhatever%3Fx%3D1"
        assert (await client.get("/events")).status_code == 401
        assert (await client.post("/q/whatever", data={})).status_code == 401


async def test_token_sign_in_and_out(web: WebAnswerer) -> None:
    async with client_for(web) as client:
        page = await client.get("/signin")
        csrf = csrf_of(page.text)
        wrong = await client.post("/signin", data={"csrf": csrf, "token": "nope", "next": "/"})
        assert wrong.status_code == 401 and "That token is not valid." in wrong.text
        no_csrf = await client.post("/signin", data={"token": TOKENS["alice"]})
        assert no_csrf.status_code == 403
        good = await client.post(
            "/signin", data={"csrf": csrf, "token": TOKENS["alice"], "next": "//evil.example/x"}
        )
        assert good.status_code == 303 and good.headers["location"] == "/"  # no open redirect
        cookie = good.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()
        assert "secure" not in cookie.lower()  # plain HTTP here: see the TLS test
        inbox = await client.get("/")
        assert inbox.status_code == 200 and ">alice<" in inbox.text
        refused = await client.post("/signout", data={})
        assert refused.status_code == 403
        assert (await client.get("/")).status_code == 200  # still signed in
        out = await client.post("/signout", data={"csrf": csrf_of(inbox.text)})
        assert out.status_code == 303
        assert (await client.get("/")).status_code == 303


async def test_a_tampered_session_cookie_signs_nobody_in(web: WebAnswerer) -> None:
    async with client_for(web) as client:
        await sign_in(client, "alice")
        value = client.cookies["askq_session_web"]  # the group's session cookie
        client.cookies.set("askq_session_web", value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
        assert (await client.get("/")).status_code == 303


async def test_session_cookies_are_secure_behind_tls(seam: Seam) -> None:
    async with web_replica(seam, public_url="https://askq.example.com") as (_, web):
        async with client_for(web) as client:
            page = await client.get("/signin")
            assert "secure" in page.headers["set-cookie"].lower()


async def test_trusted_proxy_identity(seam: Seam) -> None:
    async with web_replica(
        seam, users="", proxy_header="X-Forwarded-Email", trusted_proxies="10.0.0.0/8"
    ) as (_, web):
        headers = {"X-Forwarded-Email": "dana@example.com"}
        async with client_for(web, host="10.1.2.3") as proxied:
            page = await proxied.get("/", headers=headers)
            assert page.status_code == 200 and "dana@example.com" in page.text
        async with client_for(web, host="192.0.2.9") as direct:  # not the proxy: ignored
            assert (await direct.get("/", headers=headers)).status_code == 303
            page = await direct.get("/signin")
            assert "Sign in through your organisation" in page.text
            assert 'name="token"' not in page.text  # no token sign-in configured
        async with client_for(web, host="10.1.2.3") as proxied:  # not a user name: ignored
            bad = {"X-Forwarded-Email": "<script>@x"}
            assert (await proxied.get("/", headers=bad)).status_code == 303


# --- answering -----------------------------------------------------------------------------


async def _form(client: httpx.AsyncClient, request_id: str) -> str:
    page = await client.get(f"/q/{request_id}")
    assert page.status_code == 200, page.text
    return page.text


async def test_answer_an_option(seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient) -> None:
    async with asking(seam, web, SEED["questions"][0]) as (rid, task):
        inbox = await alice.get("/")
        assert f'id="req-{rid}"' in inbox.text and "destructive cleanup" in inbox.text
        html = await _form(alice, rid)
        assert 'type="radio"' in html and "Other…" in html
        reply = await alice.post(f"/q/{rid}", data={"csrf": csrf_of(html), "q0": "opt0"})
        assert reply.status_code == 303 and reply.headers["location"] == f"/q/{rid}"
        assert (await asyncio.wait_for(task, 5)).to_json() == YES_JSON
        assert (await seam.settlement(rid)).by == "web:alice"  # type: ignore[union-attr]
        final = await alice.get(f"/q/{rid}")
        assert "Answered in the web inbox by alice at " in final.text
        assert f'action="/q/{rid}"' not in final.text  # no form any more
        assert rid not in [e.id for e in await web.inbox.entries()]


async def test_single_select_other_text_overrides(
    seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        html = await _form(alice, rid)
        data = {"csrf": csrf_of(html), "q0": "other", "q0-custom": "Friday, after the freeze"}
        assert (await alice.post(f"/q/{rid}", data=data)).status_code == 303
        got = await asyncio.wait_for(task, 5)
        assert (
            got.to_json()
            == '{"answers":[{"id":"go","selected":[],"custom":"Friday, after the freeze"}]}'
        )


async def test_multi_select_with_other_and_free_text(
    seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    async with asking(seam, web, LANGS, NAME) as (rid, task):
        html = await _form(alice, rid)
        assert 'type="checkbox"' in html
        data = [
            ("csrf", csrf_of(html)),
            ("q0", "opt0"),
            ("q0", "opt2"),
            ("q0", "other"),
            ("q0-custom", "Zig"),
            ("q1-custom", "askq"),
        ]
        reply = await alice.post(
            f"/q/{rid}",
            content="&".join(f"{k}={v}" for k, v in data),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert reply.status_code == 303, reply.text
        assert (await asyncio.wait_for(task, 5)).to_json() == (
            '{"answers":[{"id":"langs","selected":["Python","Rust"],"custom":"Zig"},'
            '{"id":"name","selected":[],"custom":"askq"}]}'
        )


CHOOSE = "Choose one of the options, or choose Other… and write your own answer."
WRITE = "Write your answer in the box."
NOT_ACCEPTED = "This answer cannot be accepted: choose again from the options shown."


@pytest.mark.parametrize(
    ("questions", "form", "messages"),
    [
        ([CONFIRM], {}, [CHOOSE]),
        ([NAME], {"q0-custom": "   "}, [WRITE]),
        ([CONFIRM], {"q0": "Maybe"}, [NOT_ACCEPTED]),  # a form altered by hand
        ([CONFIRM], {"q0": "opt9"}, [NOT_ACCEPTED]),
        (
            [CONFIRM],
            {"q0": "other"},
            ["You chose Other…: write your answer in its box, or choose an option."],
        ),
        ([CONFIRM], {"q0": ["opt0", "opt1"]}, ["Choose only one option."]),
        ([CONFIRM, NAME], {}, [CHOOSE, WRITE]),
        (
            [CONFIRM],
            {"q0-custom": "x" * 4001},
            ["Your answer is too long: at most 4,000 characters."],
        ),
    ],
)
async def test_invalid_answers_say_what_to_do_beside_the_field(
    seam: Seam,
    web: WebAnswerer,
    alice: httpx.AsyncClient,
    questions: list[dict[str, Any]],
    form: dict[str, Any],
    messages: list[str],
) -> None:
    """The form's messages are written for the person filling it in: they never name a
    question by its id (the page does not show ids) nor speak of "custom text"."""
    async with asking(seam, web, *questions) as (rid, task):
        html = await _form(alice, rid)
        reply = await alice.post(f"/q/{rid}", data={"csrf": csrf_of(html), **form})
        assert reply.status_code == 422
        errors = re.findall(r'class="field-error" role="alert">([^<]*)<', reply.text)
        assert [unescape(e) for e in errors] == messages
        for question in questions:
            assert f"&#34;{question['id']}&#34;" not in reply.text
        assert "custom text" not in reply.text and "answer to &#34;" not in reply.text
        # What was typed stays in the form; nothing was answered.
        if "q0-custom" in form and form["q0-custom"].strip():
            assert form["q0-custom"][:50] in reply.text
        assert await web.group.holds(rid) and not task.done()


async def test_a_post_without_csrf_changes_nothing(
    seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        for data in ({"q0": "opt0"}, {"q0": "opt0", "csrf": "forged-token-value-123"}):
            reply = await alice.post(f"/q/{rid}", data=data)
            assert reply.status_code == 403
        assert await web.group.holds(rid) and not task.done()


async def test_a_second_submission_shows_already_answered(
    seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        html = await _form(alice, rid)
        first = await alice.post(f"/q/{rid}", data={"csrf": csrf_of(html), "q0": "opt0"})
        assert first.status_code == 303
        second = await alice.post(f"/q/{rid}", data={"csrf": csrf_of(html), "q0": "opt1"})
        assert second.status_code == 409
        assert "already answered in the web inbox by alice at " in second.text
        assert (await asyncio.wait_for(task, 5)).answers[0].selected == ["Yes (Recommended)"]


async def test_answered_elsewhere_leaves_the_inbox_with_the_reason(seam: Seam) -> None:
    """A web group and another group of the same tier: the other answers; the web inbox
    drops the question, a late web answer is refused, and its page says who answered."""
    other = MemoryAnswerer(by="slack:U0ALICE")
    async with web_replica(seam) as (_, web), running(seam, other, "other"):
        async with client_for(web) as bob:
            await sign_in(bob, "bob")
            async with asking(seam, web, CONFIRM) as (rid, task):
                await other.next_presented()
                html = await _form(bob, rid)
                await other.answer(rid, [{"id": "go", "selected": ["No"]}])
                await asyncio.wait_for(task, 5)

                async def gone() -> bool:
                    return rid not in [e.id for e in await web.inbox.entries()]

                await eventually(gone)
                final = await web.inbox.final(rid)
                assert final is not None and final.reason == "answered in Slack by U0ALICE"
                late = await bob.post(f"/q/{rid}", data={"csrf": csrf_of(html), "q0": "opt0"})
                assert late.status_code == 409
                assert "already answered in Slack by U0ALICE" in late.text
                page = await bob.get(f"/q/{rid}")
                assert "Answered in Slack by U0ALICE" in page.text and ">No<" in page.text
                assert "slack:U0ALICE" not in page.text + late.text


async def test_a_cancelled_question_says_so(
    seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    async with asking(seam, web, CONFIRM) as (rid, task):
        await seam.abort_turn(CALLER.turn_id)
        with pytest.raises(AskError):
            await asyncio.wait_for(task, 5)

        async def gone() -> bool:
            return rid not in [e.id for e in await web.inbox.entries()]

        await eventually(gone)
        page = await alice.get(f"/q/{rid}")
        assert "Cancelled" in page.text and "cancelled: the turn was aborted" in page.text


async def test_unknown_request_is_404(alice: httpx.AsyncClient) -> None:
    assert (await alice.get("/q/no-such-request")).status_code == 404


async def test_agent_text_is_escaped(
    seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    async with asking(seam, web, HOSTILE) as (rid, _):
        for page in (await alice.get("/"), await alice.get(f"/q/{rid}")):
            assert "<script>" not in page.text and "<img" not in page.text
            assert "<b>bold" not in page.text and "<i>yes" not in page.text
            assert "&lt;script&gt;" in page.text or "&lt;b&gt;bold" in page.text
            assert page.headers["content-security-policy"].startswith("default-src 'none'")
            assert "unsafe-inline" not in page.headers["content-security-policy"]
            assert page.headers["referrer-policy"] == "no-referrer"


# --- allowlists and filters ------------------------------------------------------------------


async def test_routes_decide_who_sees_and_answers(seam: Seam) -> None:
    routes = json.dumps({"tenant=acme": ["alice"], "tenant=beta": "*"})
    async with web_replica(seam, routes=routes) as (_, web):
        async with client_for(web) as alice, client_for(web) as bob:
            await sign_in(alice, "alice")
            await sign_in(bob, "bob")
            async with asking(seam, web, CONFIRM, scope={"tenant": "acme"}) as (rid, task):
                assert rid in (await alice.get("/")).text
                assert rid not in (await bob.get("/")).text
                page = await bob.get(f"/q/{rid}")
                assert page.status_code == 403 and "bob may not" in page.text
                refused = await bob.post(
                    f"/q/{rid}", data={"csrf": csrf_of(page.text), "q0": "opt0"}
                )
                assert refused.status_code == 403 and not task.done()
            # No route for this scope: the group declines; with no other tier, nobody can.
            with pytest.raises(AskError) as caught:
                await seam.ask({"questions": [CONFIRM]}, CALLER, scope={"tenant": "gamma"})
            assert caught.value.code is ErrorCode.NO_ANSWERER


async def test_filter_by_scope(seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient) -> None:
    async with asking(seam, web, CONFIRM, scope={"tenant": "acme"}) as (acme, _):
        async with asking(seam, web, NAME, scope={"tenant": "beta"}) as (beta, _):
            page = (await alice.get("/", params={"scope": "tenant=acme"})).text
            assert acme in page and beta not in page
            assert 'data-stream="/events?scope=tenant%3Dacme"' in page
            page = (await alice.get("/", params={"scope": "tenant=*"})).text
            assert acme in page and beta in page
            bad = await alice.get("/", params={"scope": "tenant"})
            assert "a filter is key=pattern" in bad.text


# --- several replicas as one -----------------------------------------------------------------


async def test_any_replica_serves_any_page(backend: Backend) -> None:
    """Two replicas, each with its own connection to Redis: what one was offered, the
    other lists and answers; the asker gets the answer."""
    async with backend.seam() as one, backend.seam() as two:
        async with (
            web_replica(one, consumer="a") as (_, web_a),
            web_replica(two, consumer="b") as (_, web_b),
        ):
            async with client_for(web_b) as carol:
                await sign_in(carol, "carol")
                async with asking(one, web_a, CONFIRM) as (rid, task):
                    assert rid in (await carol.get("/")).text
                    html = await _form(carol, rid)
                    reply = await carol.post(
                        f"/q/{rid}", data={"csrf": csrf_of(html), "q0": "opt1"}
                    )
                    assert reply.status_code == 303
                    assert (await asyncio.wait_for(task, 5)).answers[0].selected == ["No"]
                    # The sign-in cookie works at the other replica too (same secret).
                    async with client_for(web_a) as same:
                        same.cookies.update(carol.cookies)
                        assert "carol" in (await same.get("/")).text


# --- health ----------------------------------------------------------------------------------


async def test_health_and_readiness(web: WebAnswerer) -> None:
    async with client_for(web) as client:
        assert (await client.get("/healthz")).text == "ok"
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.text == "ready"


async def test_not_ready_until_registered(seam: Seam) -> None:
    from web_helpers import web_settings

    from askq.answerers.web import WebAnswerer as Web

    answerer = Web(settings=web_settings(), serve=False)
    from askq import AnswererRuntime

    runtime = AnswererRuntime(seam, answerer, group="web")
    await answerer.start(runtime._handle)  # started, not yet registered
    try:
        async with client_for(answerer) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 503 and "not registered" in ready.text
    finally:
        await answerer.stop()


# --- the dashboard -------------------------------------------------------------------------


async def test_fleet_dashboard(seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient) -> None:
    other = MemoryAnswerer(by="auto:rule[1]")
    async with running(seam, other, "rules", priority=5):
        async with asking(seam, web, CONFIRM) as (rid, _):
            page = await alice.get("/fleet")
            assert page.status_code == 200
            body = page.text
            # Both groups, their tiers, kinds and live replicas with heartbeat ages.
            assert "<td>web</td><td>web</td>" in body and "<td>rules</td><td>memory</td>" in body
            assert body.count(" s ago</span>") == 2
            assert "<td>CLAIMED</td><td>0</td><td>1</td>" in body
            assert "No sweeper is running" in body
            html = await _form(alice, rid)
            await alice.post(f"/q/{rid}", data={"csrf": csrf_of(html), "q0": "opt0"})
        live = await alice.get("/fleet/live")
        assert live.status_code == 200 and "<html" not in live.text
        # The deployment's settlements: who, through which group, how long it took.
        row = live.text[live.text.index(f'data-id="{rid}"') :].split("</tr>")[0]
        assert "answered in the web inbox by alice" in row and "<td>web</td>" in row
        assert " s</td>" in row
        assert "Nothing pending." in live.text
    async with client_for(web) as anonymous:
        assert (await anonymous.get("/fleet")).status_code == 303
        assert (await anonymous.get("/fleet/live")).status_code == 401


async def test_fleet_shows_sweepers_and_failed_sends(
    backend: Backend, seam: Seam, web: WebAnswerer, alice: httpx.AsyncClient
) -> None:
    from test_sweeper import Flaky, arq_sweeper

    async def live_body() -> str:
        return (await alice.get("/fleet/live")).text

    # A channel ahead of the web tier whose posts always fail: it gives the question
    # back after its tries, and the dashboard lists the failed send.
    channel = Flaky(fail=10**6, retry_after=0.05)
    async with running(seam, channel, "chat", priority=-1):
        async with asking(seam, web, CONFIRM) as (rid, _):
            body = await live_body()
            assert (
                f"<td>memory</td><td>post</td><td>{rid}</td><td>3</td>"
                "<td>RetryLater: rate limited</td>" in body
            )
    assert "No sweeper is running" in await live_body()
    async with arq_sweeper(backend):  # the sweeper as `askq sweeper` runs it (it beats)

        async def sweeper_shown() -> bool:
            return "No sweeper is running" not in await live_body()

        await eventually(sweeper_shown)
        assert " s ago</td><td>" in await live_body()


async def test_a_failure_of_ours_is_a_page_for_a_person_not_the_exception(
    web: WebAnswerer, alice: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(request_id: str) -> Any:
        raise AskError(ErrorCode.INTERNAL, "unexpected KeyError: 'tier' in requests.lua")

    monkeypatch.setattr(web.group, "request", broken)
    page = await alice.get("/q/" + "0" * 32)
    assert page.status_code == 500
    assert "askq could not show this page. Try again in a moment" in page.text
    assert "KeyError" not in page.text and "lua" not in page.text
