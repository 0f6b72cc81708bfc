"""The fleet's last hour, minute by minute (`GroupHandle.trends`, the web dashboard's
charts): questions asked and answered, escalations, timeouts and failures, the time
from ask to answer by group (median and 90th percentile), and which tier answers what
share.

Read from the per-minute counts the scripts keep in `{p}:trends` as they ask, settle
and escalate (lua/common.lua, `count`): one HGETALL per shard, whatever the traffic.
The time to answer is counted in buckets 19 % wide (`floor(4 * log2(ms))`); a
percentile is the middle of the bucket it falls in, within 10 % of the true value.
Plain reads only.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from pydantic import BaseModel

from ..redis._connections import redis_errors, server_ms

if TYPE_CHECKING:
    from ..seam._seam import Seam

MINUTES = 60  # the minute in progress and the 59 before it
MINUTE_MS = 60_000
BUCKETS_PER_DOUBLING = 4  # lua/common.lua, count_settled


class MinuteCounts(BaseModel):
    """What happened in one minute (`minute_ms`: its start, on the server's clock)."""

    minute_ms: int
    asked: int = 0
    answered: int = 0  # through a group (a person, a rule)
    defaulted: int = 0  # timed out, answered with the ask's default
    timed_out: int = 0  # timed out with no default
    cancelled: int = 0
    failed: int = 0  # nobody could answer (NO_ANSWERER)
    escalated: int = 0  # a claim not answered in time, passed on


class GroupTimes(BaseModel):
    """A group's answers in the hour and how long the agents waited for them."""

    group: str
    tier: int | None  # the tier it answered at (the latest, if it moved)
    answered: int
    median_seconds: float
    p90_seconds: float
    escalated: int = 0


class TierShare(BaseModel):
    tier: int | None
    answered: int
    share: float  # of the hour's answers through a group, 0..1
    groups: list[str]  # the groups that answered at it, most answers first


class FleetTrends(BaseModel):
    """The last hour: `minutes` oldest first, the last one in progress."""

    now_ms: int
    minutes: list[MinuteCounts]
    groups: list[GroupTimes]  # by tier, then name
    tiers: list[TierShare]  # by tier
    totals: MinuteCounts  # the hour's sums (its minute_ms: the first minute's)

    @property
    def empty(self) -> bool:
        t = self.totals
        return not (
            t.asked + t.answered + t.defaulted + t.timed_out + t.cancelled + t.failed + t.escalated
        )


def bucket_bounds_seconds(bucket: int) -> tuple[float, float]:
    """The times to answer bucket `bucket` counts: [low, high) seconds."""
    return (
        2 ** (bucket / BUCKETS_PER_DOUBLING) / 1000,
        2 ** ((bucket + 1) / BUCKETS_PER_DOUBLING) / 1000,
    )


def percentile(buckets: Counter[int], q: float) -> float:
    """The q-quantile (0..1) of the times counted in `buckets`, in seconds: the
    geometric middle of the bucket it falls in (within 10 % of the true value; one
    answer has one median and one 90th percentile, the same)."""
    total = sum(buckets.values())
    if total == 0:
        return 0.0
    rank = q * total
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            break
    low, high = bucket_bounds_seconds(bucket)
    return math.sqrt(low * high)


_SETTLED = {"defaulted", "timed_out", "cancelled", "failed"}


def trends_from(counts: list[dict[str, str]], now_ms: int) -> FleetTrends:
    """The trends of the shards' counts (`{p}:trends` of each, as read)."""
    last = now_ms // MINUTE_MS
    first = last - MINUTES + 1
    minutes = [MinuteCounts(minute_ms=m * MINUTE_MS) for m in range(first, last + 1)]
    times: dict[str, Counter[int]] = defaultdict(Counter)
    tier_of: dict[str, tuple[int, int | None]] = {}  # group -> (minute, tier) latest
    escalated: Counter[str] = Counter()
    by_tier: dict[int | None, Counter[str]] = defaultdict(Counter)
    for fields in counts:
        for field, value in fields.items():
            minute_text, sep, what = field.partition("|")
            if not sep or not minute_text.isdigit():
                continue  # `minute` (the last cleaned), or not ours
            minute = int(minute_text)
            if not first <= minute <= last:
                continue
            try:
                n = int(value)
            except ValueError:
                continue
            row = minutes[minute - first]
            kind, _, rest = what.partition("|")
            if kind == "asked":
                row.asked += n
            elif kind in _SETTLED:
                setattr(row, kind, getattr(row, kind) + n)
            elif kind == "escalated":
                row.escalated += n
                if rest:
                    escalated[rest] += n
            elif kind == "answered":
                row.answered += n
                # answered|<tier>|<bucket>|<group> (the group last: it may hold '|')
                tier_text, _, rest = rest.partition("|")
                bucket_text, _, group = rest.partition("|")
                if not group or not bucket_text.lstrip("-").isdigit():
                    continue
                tier = int(tier_text) if tier_text.lstrip("-").isdigit() else None
                times[group][int(bucket_text)] += n
                by_tier[tier][group] += n
                if group not in tier_of or tier_of[group][0] <= minute:
                    tier_of[group] = (minute, tier)
    groups = [
        GroupTimes(
            group=group,
            tier=tier_of[group][1],
            answered=sum(buckets.values()),
            median_seconds=percentile(buckets, 0.5),
            p90_seconds=percentile(buckets, 0.9),
            escalated=escalated.pop(group, 0),
        )
        for group, buckets in times.items()
    ]
    # A group that only escalated in the hour is listed too (it answered nothing).
    groups += [
        GroupTimes(
            group=group, tier=None, answered=0, median_seconds=0.0, p90_seconds=0.0, escalated=n
        )
        for group, n in escalated.items()
    ]
    groups.sort(key=lambda g: (g.tier is None, g.tier if g.tier is not None else 0, g.group))
    answered = sum(sum(c.values()) for c in by_tier.values())
    tiers = [
        TierShare(
            tier=tier,
            answered=sum(c.values()),
            share=sum(c.values()) / answered if answered else 0.0,
            groups=[g for g, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))],
        )
        for tier, c in sorted(by_tier.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    ]
    totals = MinuteCounts(minute_ms=first * MINUTE_MS)
    for row in minutes:
        for name in MinuteCounts.model_fields:
            if name != "minute_ms":
                setattr(totals, name, getattr(totals, name) + getattr(row, name))
    return FleetTrends(now_ms=now_ms, minutes=minutes, groups=groups, tiers=tiers, totals=totals)


async def fleet_trends(seam: Seam) -> FleetTrends:
    """The last hour over every shard of the seam's deployment."""
    with redis_errors(seam.settings):
        now = await server_ms(seam.redis)
        counts = [
            await seam.redis.hgetall(shard.keys.trends)  # type: ignore[misc]
            for shard in seam.shards
        ]
    return trends_from(counts, now)
