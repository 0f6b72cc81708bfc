"""Sign-in attempts rate-limited per client address and per user name, counted in Redis
so the replicas share the count; over the limit, a 429 page with Retry-After."""

from __future__ import annotations

import httpx
import pytest
from web_helpers import TOKENS, client_for, csrf_of, web_replica

from askq import Seam


async def attempt(client: httpx.AsyncClient, token: str, **headers: str) -> httpx.Response:
    page = await client.get("/signin", headers=headers)
    return await client.post(
        "/signin",
        data={"csrf": csrf_of(page.text), "token": token, "next": "/"},
        headers=headers,
    )


@pytest.fixture
def limited() -> dict[str, int]:
    return {"signin_limit": 3, "signin_window": 120}


async def test_an_address_over_the_limit_gets_429_at_every_replica(
    seam: Seam, limited: dict[str, int]
) -> None:
    async with web_replica(seam, **limited) as (_, one), web_replica(seam, **limited) as (_, two):
        async with client_for(one, "10.0.0.5") as a, client_for(two, "10.0.0.5") as b:
            for client in (a, b, a):
                assert (await attempt(client, "guess")).status_code == 401
            # The fourth, at either replica, even with a good token: refused unchecked.
            for client in (b, a):
                refused = await attempt(client, TOKENS["alice"])
                assert refused.status_code == 429
                assert "Too many sign-in attempts" in refused.text
                assert 0 < int(refused.headers["retry-after"]) <= 120
                assert "askq_session_web" not in refused.cookies
            assert (await a.get("/")).status_code == 303  # still signed out
        async with client_for(two, "10.0.0.6") as other:  # another address is not limited
            assert (await attempt(other, TOKENS["alice"])).status_code == 303
            assert (await other.get("/")).status_code == 200


async def test_a_users_sign_ins_are_limited_wherever_they_come_from(
    seam: Seam, limited: dict[str, int]
) -> None:
    async with web_replica(seam, **limited) as (_, web):
        for n in range(3):
            async with client_for(web, f"10.0.1.{n}") as client:
                assert (await attempt(client, TOKENS["bob"])).status_code == 303
        async with client_for(web, "10.0.1.9") as client:
            assert (await attempt(client, TOKENS["bob"])).status_code == 429
            # Failed guesses name nobody: they never lock a user out.
            assert (await attempt(client, TOKENS["carol"])).status_code == 303


async def test_behind_a_trusted_proxy_the_client_address_counts(
    seam: Seam, limited: dict[str, int]
) -> None:
    proxy = {"proxy_header": "X-Forwarded-Email", "trusted_proxies": "10.9.0.0/16"}
    async with web_replica(seam, **limited, **proxy) as (_, web):
        async with client_for(web, "10.9.0.1") as via_proxy:
            for _ in range(3):
                assert (
                    await attempt(via_proxy, "x", **{"X-Forwarded-For": "203.0.113.7"})
                ).status_code == 401
            over = await attempt(via_proxy, "x", **{"X-Forwarded-For": "203.0.113.7"})
            assert over.status_code == 429
            # Another client through the same proxy has its own count; a hop the client
            # wrote itself (left of the proxy's) does not choose the bucket.
            spoofed = {"X-Forwarded-For": "203.0.113.7, 198.51.100.2"}
            assert (await attempt(via_proxy, "x", **spoofed)).status_code == 401
        async with client_for(web, "192.0.2.1") as direct:  # not a proxy: its header is ignored
            for _ in range(3):
                assert (
                    await attempt(direct, "x", **{"X-Forwarded-For": "203.0.113.99"})
                ).status_code == 401
            assert (
                await attempt(direct, "x", **{"X-Forwarded-For": "203.0.113.98"})
            ).status_code == 429


async def test_zero_turns_the_limit_off(seam: Seam) -> None:
    async with web_replica(seam, signin_limit=0) as (_, web):
        async with client_for(web, "10.0.2.1") as client:
            for _ in range(12):
                assert (await attempt(client, "guess")).status_code == 401
