"""Scope selectors evaluated in routing (lua/common.lua, `route`): a group whose selector
cannot match a request's scope is never offered it, and a tier with no such group is
passed over without a hop. Against fakeredis and real Redis."""

from __future__ import annotations

import asyncio
import json
from fnmatch import fnmatchcase
from typing import Any

import pytest
from conftest import NO, NO_JSON, SEED, YES, YES_JSON, Backend, running

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.seam._registry import lua_match, lua_pattern

CALLER = Caller(agent_id="agent-1", turn_id="turn-1")


async def trail(seam: Seam, request_id: str) -> list[dict[str, Any]]:
    lines = await seam.redis.lrange(seam.keys.audit(request_id), 0, -1)  # type: ignore[misc]
    return [json.loads(line) for line in lines]


def offers(entries: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["tier"], e["groups"]) for e in entries if e["e"] == "offered"]


async def test_a_tier_whose_selectors_cannot_match_is_passed_over_without_a_hop(
    seam: Seam,
) -> None:
    acme = MemoryAnswerer(reply=lambda o: YES, by="acme")
    anyone = MemoryAnswerer(reply=lambda o: NO, by="anyone")
    async with (
        running(seam, acme, "acme", 0, scope={"tenant": "acme-*"}),
        running(seam, anyone, "anyone", 10),
    ):
        ids: list[str] = []
        other = await seam.ask(SEED, CALLER, scope={"tenant": "globex"}, on_published=ids.append)
        mine = await seam.ask(SEED, CALLER, scope={"tenant": "acme-eu"}, on_published=ids.append)
        unscoped = await seam.ask(SEED, CALLER, on_published=ids.append)
        await asyncio.sleep(0.2)  # a replica that wrongly got the offer would decide by now
    assert other.to_json() == NO_JSON and unscoped.to_json() == NO_JSON
    assert mine.to_json() == YES_JSON
    # Offered straight to tier 10: tier 0 was never offered it, so it never declined.
    assert offers(await trail(seam, ids[0])) == [(10, "anyone")]
    assert offers(await trail(seam, ids[1])) == [(0, "acme")]
    assert offers(await trail(seam, ids[2])) == [(10, "anyone")]
    assert not [e for e in await trail(seam, ids[0]) if e["e"] == "declined"]
    assert [o.scope for o, _ in acme.decided] == [{"tenant": "acme-eu"}]


async def test_in_one_tier_only_the_groups_that_can_match_are_offered(seam: Seam) -> None:
    eu, us = MemoryAnswerer(), MemoryAnswerer()
    anyone = MemoryAnswerer()
    async with (
        running(seam, eu, "eu", 5, scope={"region": "eu-*"}),
        running(seam, us, "us", 5, scope={"region": "us-*"}),
        running(seam, anyone, "anyone", 5),
    ):
        ids: list[str] = []
        task = asyncio.create_task(
            seam.ask(SEED, CALLER, scope={"region": "eu-west"}, on_published=ids.append)
        )
        offer = await eu.next_presented()
        await anyone.next_presented()
        row = await seam.requests.row(offer.request_id)
        assert row is not None and row.tier == 5
        assert sorted(row.undecided + row.claimers) == ["anyone", "eu"]
        await eu.answer(offer.request_id, YES)
        assert (await task).to_json() == YES_JSON
    assert offers(await trail(seam, ids[0])) == [(5, "anyone,eu")]


async def test_a_fall_through_skips_the_tiers_that_cannot_match(seam: Seam) -> None:
    first = MemoryAnswerer(accept=False)
    acme_only = MemoryAnswerer(reply=lambda o: YES, by="acme")
    last = MemoryAnswerer(reply=lambda o: NO, by="last")
    async with (
        running(seam, first, "first", 0),
        running(seam, acme_only, "acme", 5, scope={"tenant": "acme"}),
        running(seam, last, "last", 9),
    ):
        ids: list[str] = []
        answers = await seam.ask(SEED, CALLER, scope={"tenant": "globex"}, on_published=ids.append)
    assert answers.to_json() == NO_JSON
    assert offers(await trail(seam, ids[0])) == [(0, "first"), (9, "last")]


async def test_nobody_can_match_means_no_answerer_at_once(seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(reply=lambda o: YES), "acme", 0, scope={"t": "a"}):
        with pytest.raises(AskError) as failed:
            await seam.ask(SEED, CALLER, scope={"t": "b"})
    assert failed.value.code is ErrorCode.NO_ANSWERER


async def test_selectors_lua_cannot_express_are_offered_and_decided_by_the_runtime(
    seam: Seam,
) -> None:
    sets = MemoryAnswerer(reply=lambda o: YES, by="sets")
    anyone = MemoryAnswerer(reply=lambda o: NO, by="anyone")
    async with (
        running(seam, sets, "sets", 0, scope={"tenant": "[ab]cme"}),
        running(seam, anyone, "anyone", 10),
    ):
        ids: list[str] = []
        other = await seam.ask(SEED, CALLER, scope={"tenant": "globex"}, on_published=ids.append)
        mine = await seam.ask(SEED, CALLER, scope={"tenant": "acme"})
    assert other.to_json() == NO_JSON and mine.to_json() == YES_JSON
    # Offered to tier 0 (the scripts could not tell), declined there by the selector.
    assert offers(await trail(seam, ids[0])) == [(0, "sets"), (10, "anyone")]


# --- the patterns themselves: Lua's reading equals fnmatchcase, on the backend's Lua ----

GLOBS = ["acme", "acme-*", "*-eu", "a.b", "r&d (eu)%", "50%+", "x*y*z", "*", "", "^$", "é*"]
VALUES = [
    "acme",
    "acme-eu",
    "acme-",
    "xacme",
    "a.b",
    "axb",
    "r&d (eu)%",
    "r&d Xeu)%",
    "50%+",
    "500+",
    "xyz",
    "x-y-z",
    "xy",
    "",
    "^$",
    "é",
    "éa",
    "e",
]


def test_lua_pattern_refuses_what_it_cannot_express_exactly() -> None:
    assert lua_pattern("[ab]cme") is None
    assert lua_pattern("acm?") is None
    assert lua_pattern("acme-*") == "^acme%-.*$"
    assert lua_match({}) is None
    assert lua_match({"a": "x", "b": "[xy]"}) is None
    assert lua_match({"a": "x*"}) == {"a": "^x.*$"}


async def test_lua_patterns_match_exactly_what_fnmatchcase_matches(backend: Backend) -> None:
    # A test-only EVAL of the generated patterns in the backend's own Lua.
    client = backend.sync_client()
    try:
        for glob in GLOBS:
            pattern = lua_pattern(glob)
            assert pattern is not None
            for value in VALUES:
                found = client.eval(
                    "return string.find(ARGV[1], ARGV[2]) ~= nil and 1 or 0", 0, value, pattern
                )
                assert bool(found) == fnmatchcase(value, glob), (glob, value, pattern)
    finally:
        client.close()
