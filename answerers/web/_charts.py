"""The dashboard's charts, drawn on the server as inline SVG (`_charts.html`): no
script, no CDN, and the page's Content-Security-Policy stays strict (shapes carry
classes, styled from app.css, never a style attribute). This module lays them out —
scales, ticks, bars — from `FleetTrends`; the template only draws what it is given,
autoescaped (group names are operator text, and stay text).

- Questions per minute: asked beside answered, for each minute of the last hour.
- Escalations and timeouts per minute: escalated, timed out (with or without the
  ask's default), nobody to answer — stacked.
- Time to answer by group: median and 90th percentile, from the ask to the answer,
  on a log scale (a rules engine answers in milliseconds, people in minutes).
- Who answers: each tier's share of the hour's answers, and its groups.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from askq import FleetTrends, GroupTimes, MinuteCounts

from ._render import noun

WIDTH = 880  # the SVG's own units; it scales to the page's width
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 26
GROUPS_SHOWN = 12  # the groups with the most answers; the rest are counted in a note
GROUPS_NAMED = 4  # a tier's groups named beside its share


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    series: str  # the CSS class: asked, answered, escalated, timed-out, failed, ...
    value: int | float
    title: str  # what a pointer over it (or a screen reader) is told
    minute: int | None = None  # minutes ago (0: the minute in progress)


@dataclass
class Tick:
    at: float  # x or y, in the SVG's units
    label: str


@dataclass
class MinuteChart:
    """A per-minute bar chart of the last hour."""

    id: str
    title: str
    summary: str  # the chart in one sentence (its accessible description)
    height: int
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    plot: tuple[float, float, float, float]  # x, y, w, h
    legend: list[tuple[str, str, int]]  # (series, label, the hour's total)
    empty: str = ""  # the message shown instead of bars when there are none


@dataclass
class Row:
    label: str
    note: str
    y: float
    bars: list[Bar] = field(default_factory=list)
    value: str = ""  # the figures, right of the plot

    @property
    def short_label(self) -> str:
        if len(self.label) <= LABEL_CHARS:
            return self.label
        return self.label[: LABEL_CHARS - 1] + "…"


@dataclass
class RowChart:
    """One row per group (or tier) with horizontal bars."""

    id: str
    title: str
    summary: str
    height: int
    rows: list[Row]
    x_ticks: list[Tick]
    plot: tuple[float, float, float, float]
    legend: list[tuple[str, str]]  # (series, label)
    value_header: str = ""  # over the figures' column
    more: str = ""  # "3 more groups not shown"
    empty: str = ""


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 group`, `2 groups`: the count and the noun that fits it."""
    return f"{n} {noun(n, one, many)}"


def duration(seconds: float) -> str:
    """A wait as a person reads it: 2.6 ms, 40 ms, 0.4 s, 12 s, 4.5 min, 2.1 h."""
    if seconds < 0.001:
        return "< 1 ms"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 0.1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        minutes = seconds / 60
        return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _nice_max(value: int) -> tuple[int, int]:
    """An axis top at or above `value` and its tick step (1, 2 or 5 times a power of
    ten; at most 5 steps)."""
    if value <= 0:
        return 1, 1
    for power in range(0, 12):
        for base in (1, 2, 5):
            step = base * 10**power
            if step * 5 >= value:
                return step * math.ceil(value / step), step
    return value, value  # (not reached)


def _clock(ms: int) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(ms / 1000))


def _ago(minutes: int) -> str:
    return "this minute" if minutes == 0 else f"{minutes} min ago"


def _minute_frame(
    minutes: list[MinuteCounts], height: int, top_value: int
) -> tuple[tuple[float, float, float, float], float, list[Tick], list[Tick], float]:
    """The plot area, the width of a minute's slot, the ticks, and the units per count
    (`top_value` 0: nothing to draw, no count axis)."""
    plot = (LEFT, TOP, WIDTH - LEFT - RIGHT, height - TOP - BOTTOM)
    px, py, pw, ph = plot
    slot = pw / max(1, len(minutes))
    top, step = _nice_max(top_value)
    per = ph / top
    y_ticks = [Tick(py + ph - v * per, str(v)) for v in range(0, top + 1, step)]
    if not top_value:
        y_ticks = []
    n = len(minutes)
    x_ticks = []
    for ago in range(n - 1, -1, -1):
        if ago % 10 == 0:
            label = "now" if ago == 0 else f"{ago} min ago"
            x_ticks.append(Tick(px + (n - 1 - ago + 0.5) * slot, label))
    return plot, slot, y_ticks, x_ticks, per


def activity_chart(trends: FleetTrends, height: int = 190) -> MinuteChart:
    """Asked and answered per minute: two bars side by side in each minute's slot."""
    minutes = trends.minutes
    top = max([max(m.asked, m.answered) for m in minutes] + [0])
    if not top:
        height = EMPTY_HEIGHT
    plot, slot, y_ticks, x_ticks, per = _minute_frame(minutes, height, top)
    px, py, pw, ph = plot
    width = max(1.0, (slot - 2) / 2)
    bars = []
    n = len(minutes)
    for i, m in enumerate(minutes):
        ago = n - 1 - i
        when = f"{_clock(m.minute_ms)} ({_ago(ago)})"
        for j, (series, value) in enumerate((("asked", m.asked), ("answered", m.answered))):
            if value:
                h = value * per
                bars.append(
                    Bar(
                        x=px + i * slot + 1 + j * width,
                        y=py + ph - h,
                        w=width,
                        h=h,
                        series=series,
                        value=value,
                        title=f"{when}: {value} {series}",
                        minute=ago,
                    )
                )
    t = trends.totals
    return MinuteChart(
        id="chart-activity",
        title="Questions per minute",
        summary=(
            f"In the last hour, {plural(t.asked, 'question')} asked and {t.answered} answered"
            f" (at most {top} in a minute)."
            if t.asked or t.answered
            else "No question was asked or answered in the last hour."
        ),
        height=height,
        bars=bars,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        plot=plot,
        legend=[("asked", "asked", t.asked), ("answered", "answered", t.answered)],
        empty="" if bars else "No questions in the last hour.",
    )


TROUBLE = (
    ("escalated", "escalated"),
    ("timed-out", "timed out"),
    ("failed", "nobody to answer"),
)


def trouble_chart(trends: FleetTrends, height: int = 140) -> MinuteChart:
    """Escalations, timeouts and failures per minute, stacked."""
    minutes = trends.minutes

    def values(m: MinuteCounts) -> dict[str, int]:
        return {
            "escalated": m.escalated,
            "timed-out": m.timed_out + m.defaulted,
            "failed": m.failed,
        }

    top = max([sum(values(m).values()) for m in minutes] + [0])
    if not top:
        height = EMPTY_HEIGHT
    plot, slot, y_ticks, x_ticks, per = _minute_frame(minutes, height, top)
    px, py, pw, ph = plot
    bars = []
    n = len(minutes)
    for i, m in enumerate(minutes):
        ago = n - 1 - i
        when = f"{_clock(m.minute_ms)} ({_ago(ago)})"
        base = py + ph
        for series, label in TROUBLE:
            value = values(m)[series]
            if not value:
                continue
            h = value * per
            base -= h
            detail = ""
            if series == "timed-out" and m.defaulted:
                detail = f" ({m.defaulted} answered with the ask's default)"
            bars.append(
                Bar(
                    x=px + i * slot + 1,
                    y=base,
                    w=max(1.0, slot - 2),
                    h=h,
                    series=series,
                    value=value,
                    title=f"{when}: {value} {label}{detail}",
                    minute=ago,
                )
            )
    t = trends.totals
    totals = {"escalated": t.escalated, "timed-out": t.timed_out + t.defaulted, "failed": t.failed}
    return MinuteChart(
        id="chart-trouble",
        title="Escalations and timeouts per minute",
        summary=(
            f"In the last hour, {t.escalated} escalated, {totals['timed-out']} timed out"
            f" ({t.defaulted} of them answered with the ask's default), {t.failed} had"
            " nobody to answer."
        ),
        height=height,
        bars=bars,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        plot=plot,
        legend=[(series, label, totals[series]) for series, label in TROUBLE],
        empty="" if bars else "No escalations, timeouts or failures in the last hour.",
    )


# The time axis: these ticks, those within the range shown.
TIME_TICKS = (
    (0.001, "1 ms"),
    (0.01, "10 ms"),
    (0.1, "100 ms"),
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (3600, "1 h"),
    (36000, "10 h"),
)
ROW_HEIGHT = 36
TIMES_LEFT, TIMES_RIGHT = 250, 150
LABEL_CHARS = 30  # a longer group name is cut (its row's title has it whole)
EMPTY_HEIGHT = 64  # a chart with nothing to draw: its message, and the time axis


def times_chart(trends: FleetTrends) -> RowChart:
    """Each group's median and 90th percentile, from the ask to the answer: a long
    light bar to the p90, a thinner dark one to the median, on a log axis."""
    answering = [g for g in trends.groups if g.answered]
    silent = [g for g in trends.groups if not g.answered]  # escalated, never answered
    shown: list[GroupTimes] = sorted(
        sorted(answering, key=lambda g: -g.answered)[:GROUPS_SHOWN],
        key=lambda g: (g.tier is None, g.tier or 0, g.group),
    )
    shown += silent[: max(0, GROUPS_SHOWN - len(shown))]
    hidden = len(answering) + len(silent) - len(shown)
    height = TOP + len(shown) * ROW_HEIGHT + BOTTOM if shown else EMPTY_HEIGHT
    plot = (TIMES_LEFT, TOP, WIDTH - TIMES_LEFT - TIMES_RIGHT, height - TOP - BOTTOM)
    px, py, pw, ph = plot
    if answering:
        low = min(g.median_seconds for g in answering)
        high = max(g.p90_seconds for g in answering)
    else:
        low, high = 1.0, 60.0
    # whole decades around the data, at least 1 s .. 1 min wide
    lo = 10 ** math.floor(math.log10(max(min(low, 1.0), 0.001)))
    hi = 10 ** math.ceil(math.log10(max(high, 60.0)))
    span = math.log10(hi) - math.log10(lo)

    def x_of(seconds: float) -> float:
        s = min(max(seconds, lo), hi)
        return px + pw * (math.log10(s) - math.log10(lo)) / span

    x_ticks = [Tick(x_of(v), label) for v, label in TIME_TICKS if lo <= v <= hi and shown]
    rows = []
    for i, g in enumerate(shown):
        y = py + i * ROW_HEIGHT
        tier = f"tier {g.tier}" if g.tier is not None else "tier ?"
        notes = [tier, plural(g.answered, "answer")]
        if g.escalated:
            notes.append(plural(g.escalated, "escalation"))
        row = Row(label=g.group, note=" · ".join(notes), y=y)
        if g.answered:
            row.bars = [
                Bar(
                    x=px,
                    y=y + 8,
                    w=max(1.0, x_of(g.p90_seconds) - px),
                    h=20,
                    series="p90",
                    value=round(g.p90_seconds, 3),
                    title=f"{g.group}: 90 % answered within {duration(g.p90_seconds)}",
                ),
                Bar(
                    x=px,
                    y=y + 13,
                    w=max(1.0, x_of(g.median_seconds) - px),
                    h=10,
                    series="median",
                    value=round(g.median_seconds, 3),
                    title=f"{g.group}: half answered within {duration(g.median_seconds)}",
                ),
            ]
            row.value = f"{duration(g.median_seconds)} · {duration(g.p90_seconds)}"
        else:
            row.value = "no answers"
        rows.append(row)
    summary = "; ".join(
        f"{g.group}: median {duration(g.median_seconds)}, 90th percentile {duration(g.p90_seconds)}"
        for g in shown
        if g.answered
    )
    return RowChart(
        id="chart-times",
        title="Time to answer by group",
        summary=(summary + ".") if summary else "No answers in the last hour.",
        height=height,
        rows=rows,
        x_ticks=x_ticks,
        plot=plot,
        legend=[("median", "median"), ("p90", "90th percentile")],
        value_header="median · p90" if shown else "",
        more=f"{plural(hidden, 'more group')} not shown." if hidden else "",
        empty="" if shown else "No answers in the last hour.",
    )


def tiers_chart(trends: FleetTrends) -> RowChart:
    """Each tier's share of the hour's answers through a group."""
    shares = trends.tiers
    height = TOP + len(shares) * ROW_HEIGHT + BOTTOM if shares else EMPTY_HEIGHT
    plot = (TIMES_LEFT, TOP, WIDTH - TIMES_LEFT - TIMES_RIGHT, height - TOP - BOTTOM)
    px, py, pw, ph = plot
    rows = []
    for i, s in enumerate(shares):
        y = py + i * ROW_HEIGHT
        named = s.groups[:GROUPS_NAMED]
        rest = len(s.groups) - len(named)
        note = ", ".join(named) + (f", +{rest} more" if rest else "")
        tier = f"Tier {s.tier}" if s.tier is not None else "Tier ?"
        percent = f"{100 * s.share:.0f} %"
        rows.append(
            Row(
                label=tier,
                note=note,
                y=y,
                bars=[
                    Bar(
                        x=px,
                        y=y + 8,
                        w=max(1.0, pw * s.share),
                        h=20,
                        series="share",
                        value=round(s.share, 4),
                        title=f"{tier}: {percent} of the answers ({s.answered})",
                    )
                ],
                value=f"{percent} · {s.answered}",
            )
        )
    x_ticks = [Tick(px + pw * f, f"{int(100 * f)} %") for f in (0, 0.25, 0.5, 0.75, 1) if shares]
    return RowChart(
        id="chart-tiers",
        title="Who answers",
        summary=(
            "; ".join(
                f"tier {s.tier}: {100 * s.share:.0f} % of the answers ({s.answered})"
                for s in shares
            )
            + "."
            if shares
            else "No answers in the last hour."
        ),
        height=height,
        rows=rows,
        x_ticks=x_ticks,
        plot=plot,
        legend=[],
        empty="" if shares else "No answers in the last hour.",
    )


def charts(trends: FleetTrends) -> dict[str, object]:
    """What `_charts.html` draws."""
    return {
        "activity": activity_chart(trends),
        "trouble": trouble_chart(trends),
        "times": times_chart(trends),
        "tiers": tiers_chart(trends),
    }
