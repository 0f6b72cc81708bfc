"""The deployment's recent settlements (`GroupHandle.recent_settlements`), read from the
audit's recent index: every group's, newest first, who answered through which group
and how long it took; bounded. And the web dashboard showing them."""

from __future__ import annotations

import asyncio
import contextlib
import re

from conftest import running
from test_web_http import CALLER, CONFIRM
from web_helpers import signed_in_over_http as signed_in
from web_helpers import web_replica

from askq import AskError, Caller, Seam
from askq.answerers.memory import MemoryAnswerer

NO = [{"id": "go", "selected": ["No"]}]


def question(n: int) -> dict[str, object]:
    return {**CONFIRM, "header": f"Deploy {n}"}


async def test_every_groups_settlements_newest_first_with_group_and_time(seam: Seam) -> None:
    rules = MemoryAnswerer(reply=lambda offer: NO, by="auto:rules")
    quiet = MemoryAnswerer(by="console:ops")
    async with running(seam, rules, "rules", scope={"team": "a"}):
        async with running(seam, quiet, "oncall", scope={"team": "b"}):
            # The handle of one group sees what another group settled.
            assert await quiet.group.recent_settlements() == []
            for n in range(3):
                await seam.ask({"questions": [question(n)]}, CALLER, scope={"team": "a"})
            asking = asyncio.create_task(
                seam.ask(
                    {"questions": [question(9)]},
                    Caller(agent_id="x", turn_id="t"),
                    scope={"team": "b"},
                )
            )
            offer = await quiet.next_presented()
            await asyncio.sleep(0.3)  # it waited a moment before its human answered
            await quiet.answer(offer.request_id, NO)
            await asking
            rows = await quiet.group.recent_settlements(10)
    assert [r.header for r in rows] == ["Deploy 9", "Deploy 2", "Deploy 1", "Deploy 0"]
    assert rows[0].id == offer.request_id
    assert (rows[0].by, rows[0].group, rows[0].agent) == ("console:ops", "oncall", "x")
    assert rows[0].outcome == "answered by console:ops through oncall"
    assert rows[0].took_seconds is not None and rows[0].took_seconds >= 0.3
    assert {(r.by, r.group) for r in rows[1:]} == {("auto:rules", "rules")}
    assert all(r.state == "ANSWERED" and r.settled_ms >= (r.created_ms or 0) for r in rows)
    assert [r.settled_ms for r in rows] == sorted((r.settled_ms for r in rows), reverse=True)


async def test_bounded_and_cancellations_say_why(seam: Seam) -> None:
    rules = MemoryAnswerer(reply=lambda offer: NO, by="auto:rules")
    holder = MemoryAnswerer(by="console:ops")
    async with running(seam, rules, "rules", scope={"team": "a"}):
        async with running(seam, holder, "holder", scope={"team": "b"}):
            for n in range(5):
                await seam.ask({"questions": [question(n)]}, CALLER, scope={"team": "a"})
            asking = asyncio.create_task(
                seam.ask({"questions": [question(7)]}, CALLER, scope={"team": "b"})
            )
            await holder.next_presented()
            asking.cancel()  # the caller withdraws
            with contextlib.suppress(asyncio.CancelledError, AskError):
                await asking
            await holder.next_retracted()
            two = await holder.group.recent_settlements(2)
            assert await holder.group.recent_settlements(0) == []
            everything = await holder.group.recent_settlements(10_000)  # capped, not refused
    assert [r.header for r in two] == ["Deploy 7", "Deploy 4"]
    assert two[0].state == "CANCELLED" and two[0].group is None
    assert two[0].outcome == "cancelled: the caller withdrew the question"
    assert len(everything) == 6


async def test_the_dashboard_lists_the_deployments_settlements(seam: Seam) -> None:
    other = MemoryAnswerer(by="console:ops")
    async with web_replica(seam, serve=True) as (_, web), running(seam, other, "oncall"):
        async with signed_in(web) as client:
            asking = asyncio.create_task(
                seam.ask({"questions": [{**CONFIRM, "header": "<i>Rotate</i>"}]}, CALLER)
            )
            offer = await other.next_presented()
            await other.answer(offer.request_id, NO)
            await asking
            body = (await client.get("/fleet/live")).text
    row = body[body.index(f'data-id="{offer.request_id}"') :].split("</tr>")[0]
    assert "&lt;i&gt;Rotate&lt;/i&gt;" in row  # agent text stays text
    assert "answered in a terminal by ops" in row  # as the inbox words it
    assert "<td>oncall</td>" in row and "agent-7" in row


def _tiles(body: str) -> list[str]:
    """The dashboard's tiles as read: "1 group", "0 live sweepers"..."""
    found = re.findall(r'<div class="n[^"]*">(\d+)</div><div class="what">([^<]+)</div>', body)
    return [f"{n} {what}" for n, what in found]


async def test_the_dashboard_reads_as_a_person_would(seam: Seam) -> None:
    """The Question column shows the question (its header a chip beside it, agent text
    as text), and the tiles say "1 group", not "1 groups"."""
    other = MemoryAnswerer(by="console:ops")
    two = [
        {**CONFIRM, "header": "Rotate", "question": "Rotate the <b>API</b> keys now?"},
        {**CONFIRM, "id": "when", "header": "When"},
    ]
    async with web_replica(seam, serve=True) as (_, web):
        async with signed_in(web) as client:
            alone = (await client.get("/fleet/live")).text
            async with running(seam, other, "oncall"):
                asking = asyncio.create_task(seam.ask({"questions": two}, CALLER))
                offer = await other.next_presented()
                await other.answer(offer.request_id, [*NO, {"id": "when", "selected": ["No"]}])
                await asking
                body = (await client.get("/fleet/live")).text
    assert _tiles(alone) == [
        "1 group",
        "1 live replica",
        "0 live sweepers",
        "0 requests pending",
        "0 sends that failed",
        "0 live pages on this replica",
    ]
    assert _tiles(body)[:2] == ["2 groups", "2 live replicas"]
    row = body[body.index(f'data-id="{offer.request_id}"') :].split("</tr>")[0]
    cell = row.split('<td class="question">')[1].split("</td>")[0]
    assert '<span class="chip">Rotate</span>' in cell
    assert "Rotate the &lt;b&gt;API&lt;/b&gt; keys now?" in cell
    assert "+1 more" in cell


async def test_the_charts_keep_group_names_text_and_show_the_busiest_groups(seam: Seam) -> None:
    """The charts show what the counts say, escaped (a name written into the counts by
    anyone stays text); with many groups, the 12 that answered most, and how many more."""
    seconds, _ = await seam.redis.time()
    minute = int(seconds) // 60
    key = seam.shards[0].keys.trends
    fields = {f"{minute}|answered|0|50|<b>bold</b>": "100"}
    fields |= {f"{minute}|answered|1|60|g{n:02}": str(n + 1) for n in range(30)}
    await seam.redis.hset(key, mapping=fields)  # type: ignore[misc]
    async with web_replica(seam, serve=True) as (_, web):
        async with signed_in(web) as client:
            body = (await client.get("/fleet/live")).text
    times = body[body.index('id="chart-times"') :].split("</figure>")[0]
    assert "<b>bold</b>" not in body
    assert 'data-label="&lt;b&gt;bold&lt;/b&gt;"' in times
    labels = re.findall(r'<g class="row" data-label="([^"]+)"', times)
    # the 12 with the most answers (g19..g29 answered 20..30 times), by tier and name
    assert labels == ["&lt;b&gt;bold&lt;/b&gt;", *[f"g{n}" for n in range(19, 30)]]
    assert "19 more groups not shown." in times
