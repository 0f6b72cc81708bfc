"""The fleet's last hour (`GroupHandle.trends`, the web dashboard's charts): counted by
the scripts in the step that asks, settles or escalates, read back minute by minute;
the time to answer by group and each tier's share; minutes older than the hour are
forgotten by the scripts themselves."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import Counter

import pytest
from conftest import SEED, YES, Backend, running, sweeping

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.observing._trends import (
    MINUTE_MS,
    bucket_bounds_seconds,
    fleet_trends,
    percentile,
    trends_from,
)

pytestmark = pytest.mark.cluster  # the counts of every shard, on a cluster too


def caller(turn: str) -> Caller:
    return Caller(agent_id="agent-7", turn_id=turn)


async def server_minute(seam: Seam) -> int:
    seconds, micros = await seam.redis.time()
    return (int(seconds) * 1000 + int(micros) // 1000) // MINUTE_MS


async def test_the_hour_counts_what_happened(backend: Backend, seam: Seam) -> None:
    """Asked, answered through each group at its tier with the wait it took, escalated,
    timed out (with and without a default), cancelled, nobody to ask: each counted
    once, in the minute it happened, read back over every shard."""
    rules = MemoryAnswerer(reply=lambda offer: YES, by="auto:rules")
    desk = MemoryAnswerer(by="console:ops")
    slow = MemoryAnswerer()  # claims and never answers: escalates to `backup`
    backup = MemoryAnswerer(reply=lambda offer: YES, by="auto:backup")
    async with (
        sweeping(backend),
        running(seam, rules, "rules", priority=0, scope={"team": "a"}),
        running(seam, desk, "desk", priority=0, scope={"team": "b"}),
        running(seam, slow, "slow", priority=0, scope={"team": "c"}, escalate_after=0.3),
        running(seam, backup, "backup", priority=5, scope={"team": "c"}),
    ):
        before = await server_minute(seam)
        for n in range(3):
            await seam.ask(SEED, caller(f"r{n}"), scope={"team": "a"})
        asking = asyncio.create_task(seam.ask(SEED, caller("d"), scope={"team": "b"}))
        offer = await desk.next_presented()
        await asyncio.sleep(0.4)  # the human reads it first
        await desk.answer(offer.request_id, YES)
        await asking
        await asyncio.wait_for(seam.ask(SEED, caller("e"), scope={"team": "c"}), 10)
        with pytest.raises(AskError) as err:  # held by desk, nobody answers in time
            await seam.ask(SEED, caller("t"), scope={"team": "b"}, timeout=0.2)
        assert err.value.code is ErrorCode.TIMED_OUT
        await seam.ask(SEED, caller("u"), scope={"team": "b"}, timeout=0.2, on_timeout="default")
        signal, published = asyncio.Event(), asyncio.Event()
        asking = asyncio.create_task(
            seam.ask(
                SEED,
                caller("c"),
                scope={"team": "b"},
                signal=signal,
                on_published=lambda request_id: published.set(),
            )
        )
        await asyncio.wait_for(published.wait(), 5)
        signal.set()  # the caller withdraws
        with contextlib.suppress(AskError):
            await asking
        with pytest.raises(AskError) as err:  # no group's selector takes team=z
            await seam.ask(SEED, caller("z"), scope={"team": "z"})
        assert err.value.code is ErrorCode.NO_ANSWERER
        trends = await desk.group.trends()
        recent = await desk.group.recent_settlements(20)
        after = await server_minute(seam)

    t = trends.totals
    assert (t.asked, t.answered, t.escalated) == (9, 5, 1)
    assert (t.timed_out, t.defaulted, t.cancelled, t.failed) == (1, 1, 1, 1)
    assert len(trends.minutes) == 60
    assert trends.minutes[-1].minute_ms == after * MINUTE_MS
    # everything in the minute(s) the test ran in, nothing before
    counted = [m for m in trends.minutes if m.asked or m.answered]
    assert {m.minute_ms // MINUTE_MS for m in counted} <= set(range(before, after + 1))
    assert sum(m.asked for m in trends.minutes) == 9

    by_group = {g.group: g for g in trends.groups}
    assert [g.group for g in trends.groups] == ["desk", "rules", "backup", "slow"]
    assert (by_group["rules"].tier, by_group["rules"].answered) == (0, 3)
    assert (by_group["desk"].tier, by_group["desk"].answered) == (0, 1)
    assert (by_group["backup"].tier, by_group["backup"].answered) == (5, 1)
    assert (by_group["slow"].answered, by_group["slow"].escalated) == (0, 1)
    # desk's one answer: its median lies in the bucket of the wait the trail recorded
    took = next(r.took_seconds for r in recent if r.id == offer.request_id)
    assert took is not None and took >= 0.4
    assert by_group["desk"].median_seconds == pytest.approx(took, rel=0.1)
    assert by_group["desk"].p90_seconds == by_group["desk"].median_seconds
    # backup answered after slow's escalation: its wait includes it
    assert by_group["backup"].median_seconds >= 0.3 / 1.2

    assert [(s.tier, s.answered, s.groups) for s in trends.tiers] == [
        (0, 4, ["rules", "desk"]),
        (5, 1, ["backup"]),
    ]
    assert [s.share for s in trends.tiers] == [pytest.approx(0.8), pytest.approx(0.2)]


async def test_a_known_hour_read_back(seam: Seam) -> None:
    """Counts written minute by minute (in every shard's hash) come back as the series,
    percentiles and shares they make; a minute older than the hour is left out."""
    now = await server_minute(seam)
    shards = [shard.keys.trends for shard in seam.shards]
    # 20 answers by `web` at tier 0 in buckets 40..43 (5 each), 10 by `auto` at tier 5
    # in bucket 0 (about 1 ms), asks in three minutes, one escalation, one of each
    # other outcome; an old minute and the cleaning marker.
    history = {
        f"{now - 59}|asked": 4,
        f"{now - 30}|asked": 20,
        f"{now}|asked": 7,
        f"{now - 30}|answered|5|0|auto": 10,
        f"{now - 10}|escalated|web": 1,
        f"{now - 10}|timed_out": 2,
        f"{now - 10}|defaulted": 1,
        f"{now - 10}|cancelled": 3,
        f"{now - 10}|failed": 1,
        f"{now - 60}|asked": 1000,  # an hour ago: not shown
        "minute": now,
    }
    for i, bucket in enumerate(range(40, 44)):
        history[f"{now - 2 + (i % 2)}|answered|0|{bucket}|web"] = 5
    for i, (field, n) in enumerate(history.items()):
        await seam.redis.hset(shards[i % len(shards)], field, str(n))  # type: ignore[misc]

    trends = await fleet_trends(seam)
    asked = [m.asked for m in trends.minutes]
    assert len(asked) == 60
    assert (asked[0], asked[29], asked[-1], sum(asked)) == (4, 20, 7, 31)
    answered = [m.answered for m in trends.minutes]
    assert (answered[29], answered[57], answered[58], sum(answered)) == (10, 10, 10, 30)
    row = trends.minutes[49]
    assert (row.escalated, row.timed_out, row.defaulted, row.cancelled, row.failed) == (
        1,
        2,
        1,
        3,
        1,
    )
    web, auto = trends.groups
    assert (web.group, web.tier, web.answered, web.escalated) == ("web", 0, 20, 1)
    # 20 answers, 5 per bucket: the median is the 10th, in bucket 41, the 90th
    # percentile the 18th, in bucket 43; each read as its bucket's (geometric) middle
    assert web.median_seconds == pytest.approx(2 ** (41.5 / 4) / 1000)
    assert web.p90_seconds == pytest.approx(2 ** (43.5 / 4) / 1000)
    assert (auto.group, auto.tier, auto.answered) == ("auto", 5, 10)
    assert auto.median_seconds == auto.p90_seconds == pytest.approx(2 ** (0.5 / 4) / 1000)
    assert [(s.tier, s.answered, round(s.share, 3)) for s in trends.tiers] == [
        (0, 20, 0.667),
        (5, 10, 0.333),
    ]


async def test_minutes_older_than_the_hour_are_deleted(seam: Seam) -> None:
    """The first count of a new minute deletes what is older than the hour (and renews
    the hash's TTL); the hour itself is kept."""
    rules = MemoryAnswerer(reply=lambda offer: YES, by="auto:rules")
    now = await server_minute(seam)
    key = seam.shard_of_turn("old").keys.trends
    await seam.redis.hset(  # type: ignore[misc]
        key,
        mapping={
            f"{now - 500}|asked": "3",
            f"{now - 61}|answered|0|12|rules": "2",
            f"{now - 60}|asked": "5",
            f"{now - 59}|asked": "6",
            "minute": str(now - 2),  # cleaned two minutes ago
        },
    )
    async with running(seam, rules, "rules"):
        await seam.ask(SEED, caller("old"))
    fields = await seam.redis.hgetall(key)  # type: ignore[misc]
    # minute now-60 is kept (the hour shown and the minute in progress), older ones go
    assert f"{now - 500}|asked" not in fields
    assert f"{now - 61}|answered|0|12|rules" not in fields
    assert fields[f"{now - 59}|asked"] == "6"
    assert int(fields["minute"]) >= now
    assert 0 < await seam.redis.ttl(key) <= 62 * 60


def test_percentile_within_ten_percent() -> None:
    """A time counted in its bucket and read back as a percentile is within 10 %."""
    for ms in (1, 7, 350, 4_000, 95_000, 3_600_000):
        bucket = math.floor(4 * math.log2(ms))  # as lua/common.lua counts it
        low, high = bucket_bounds_seconds(bucket)
        assert low <= ms / 1000 < high
        assert percentile(Counter({bucket: 1}), 0.5) == pytest.approx(ms / 1000, rel=0.1)
    assert percentile(Counter(), 0.5) == 0.0
    assert trends_from([], 0).empty
