"""Two web groups side by side on one Redis, served on one host name (issue 22, item 1):
each has its own sessions, sign-in counts, inbox and links, even with the same
ASKQ_WEB_SECRET. Against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from conftest import SEED
from web_helpers import TOKENS, client_for, csrf_of, sign_in, web_replica

from askq import Caller, Seam, SignedLinks
from askq.answerers.web import WebAnswerer, hash_token

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
TEAM = {"tenant": "team"}
MGR = {"tenant": "mgr"}
ONLY_BOB = f"bob={hash_token(TOKENS['bob'])}"


def the_same_browser(source: httpx.AsyncClient, target: httpx.AsyncClient) -> None:
    """What a browser does with two apps on one host name: it sends them the same
    cookies (whatever the port)."""
    for cookie in source.cookies.jar:
        target.cookies.set(cookie.name, cookie.value or "")


async def signed_in(client: httpx.AsyncClient) -> bool:
    return (await client.get("/")).status_code == 200


async def test_a_session_of_one_web_group_is_nobody_at_another(seam: Seam) -> None:
    """`web-team` (alice's token) and `web-mgr` (bob's only), same secret, one host.
    Alice's session at web-team does not sign her in at web-mgr (before: the same
    cookie, signed with the same key, made her "alice" there, who may see and answer
    every question of web-mgr's, having no token of it). Signing in at web-mgr does
    not sign her out of web-team."""
    async with (
        web_replica(seam, group="web-team") as (_, team),
        web_replica(seam, group="web-mgr", users=ONLY_BOB) as (_, mgr),
        client_for(team) as at_team,
        client_for(mgr) as at_mgr,
    ):
        asked = asyncio.create_task(seam.ask(SEED, CALLER))
        await sign_in(at_team, "alice")
        assert await signed_in(at_team)
        the_same_browser(at_team, at_mgr)
        assert not await signed_in(at_mgr)
        # nor does the session itself, under web-mgr's cookie name (it is signed for
        # web-team alone)
        (session,) = [c.value for c in at_team.cookies.jar if c.name.startswith("askq_session")]
        at_mgr.cookies.set("askq_session_web-mgr", session or "")
        assert not await signed_in(at_mgr)
        at_mgr.cookies.delete("askq_session_web-mgr")
        page = await at_mgr.get("/signin")
        refused = await at_mgr.post(
            "/signin", data={"csrf": csrf_of(page.text), "token": TOKENS["alice"], "next": "/"}
        )
        assert refused.status_code == 401  # alice has no token at web-mgr
        await sign_in(at_mgr, "bob")
        the_same_browser(at_mgr, at_team)
        assert await signed_in(at_team) and await signed_in(at_mgr)
        asked.cancel()


async def test_sign_in_attempts_at_one_web_group_do_not_count_at_another(seam: Seam) -> None:
    """An address over the sign-in limit at `web-team` may still sign in at `web-mgr`
    (before: the counters were the kind's, shared by every web group)."""
    limited: dict[str, Any] = {"signin_limit": 3, "signin_window": 120}
    async with (
        web_replica(seam, group="web-team", **limited) as (_, team),
        web_replica(seam, group="web-mgr", **limited) as (_, mgr),
    ):

        async def attempt(web: WebAnswerer, token: str) -> int:
            async with client_for(web, "10.0.0.5") as client:
                page = await client.get("/signin")
                reply = await client.post(
                    "/signin", data={"csrf": csrf_of(page.text), "token": token, "next": "/"}
                )
                return reply.status_code

        assert [await attempt(team, "guess") for _ in range(3)] == [401, 401, 401]
        assert await attempt(team, TOKENS["alice"]) == 429
        assert await attempt(mgr, TOKENS["alice"]) == 303


async def test_each_web_group_lists_and_answers_only_its_own(seam: Seam) -> None:
    """Each inbox lists its own group's questions; a signed link of one group is
    refused at the other, and spending it there records nothing."""
    async with (
        web_replica(seam, group="web-team", routes='{"tenant=team": "*"}') as (_, team),
        web_replica(seam, group="web-mgr", routes='{"tenant=mgr": "*"}') as (_, mgr),
        client_for(team) as at_team,
        client_for(mgr) as at_mgr,
    ):
        for_team = asyncio.create_task(seam.ask(SEED, CALLER, scope=TEAM))
        for_mgr = asyncio.create_task(seam.ask(SEED, Caller(agent_id="b", turn_id="t2"), scope=MGR))
        async with asyncio.timeout(10):
            while not (await team.inbox.entries() and await mgr.inbox.entries()):
                await asyncio.sleep(0.02)
        (team_entry,) = await team.inbox.entries()
        (mgr_entry,) = await mgr.inbox.entries()
        assert team_entry.id != mgr_entry.id
        await sign_in(at_team, "alice")
        await sign_in(at_mgr, "alice")
        assert team_entry.id in (await at_team.get("/")).text
        assert mgr_entry.id not in (await at_team.get("/")).text
        token = SignedLinks([team.config.secrets[0]]).mint(
            team_entry.id, "web-team", "carol", ttl=600
        )
        refused = await at_mgr.get(f"/a/{token}")
        assert refused.status_code == 403
        for_team.cancel()
        for_mgr.cancel()
