"""The fleet dashboard's charts in a real browser (headless Chromium, tests/chromium.py):
drawn from the deployment's per-minute counts (`{p}:trends`, written by the scripts),
with the bars, points and labels a known hour makes, an empty state, and live: a
question asked and answered shows up without a reload.

Set ASKQ_SCREENSHOTS=docs to write the README's docs/web-fleet.png.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from chromium import browser, needs_chromium, playwright_api
from conftest import Backend, running
from test_web_browser import _output, _shot, _start, ask_process, processes, signed_in_page
from test_web_browser import web_worker as web_process
from test_web_http import CALLER, CONFIRM
from web_helpers import web_replica

from askq import Seam
from askq.answerers.memory import MemoryAnswerer
from askq.answerers.web._charts import duration
from askq.observing._recent import recent_in_shards
from askq.observing._trends import MINUTE_MS, percentile

__all__ = ["browser"]  # the fixture, imported so pytest finds it

pytestmark = needs_chromium
expect = playwright_api.expect

NO = [{"id": "go", "selected": ["No"]}]

# A known hour, minute by minute (minutes ago -> what happened then), like a fleet's:
# `auto` (rules, tier 0) answers in milliseconds, `web` (people, tier 1) in seconds to
# minutes. Answers: (group, tier, bucket, n); a bucket is floor(4 * log2(ms)), so 4 is
# about 2 ms, 53 about 10 s, 65 about 78 s.
MINUTES_PLANTED = range(3, 57)
ANSWERS = {
    ago: [("auto", 0, 4 + ago % 3, 2 + ago % 5)]
    + ([("web", 1, 52 + (ago * 5) % 14, ago % 4)] if ago % 4 else [])
    for ago in MINUTES_PLANTED
}
ASKED = {ago: sum(a[3] for a in ANSWERS[ago]) + (ago * 7) % 3 for ago in MINUTES_PLANTED}
TROUBLE = {41: {"escalated|web": 2, "timed_out": 1}, 12: {"defaulted": 1, "failed": 1}}


async def plant_hour(seam: Seam) -> int:
    """Write the known hour into the shards' counts (as the scripts write them);
    returns the server's minute it is relative to."""
    seconds, micros = await seam.redis.time()
    now = (int(seconds) * 1000 + int(micros) // 1000) // MINUTE_MS
    fields: dict[str, int] = {}
    for ago, n in ASKED.items():
        fields[f"{now - ago}|asked"] = n
    for ago, answers in ANSWERS.items():
        for group, tier, bucket, n in answers:
            fields[f"{now - ago}|answered|{tier}|{bucket}|{group}"] = n
    for ago, counts in TROUBLE.items():
        for what, n in counts.items():
            fields[f"{now - ago}|{what}"] = n
    keys = [shard.keys.trends for shard in seam.shards]
    for i, (field, n) in enumerate(fields.items()):  # spread over the shards
        await seam.redis.hincrby(keys[i % len(keys)], field, n)  # type: ignore[misc]
    return now


async def server_minute(seam: Seam) -> int:
    seconds, _ = await seam.redis.time()
    return int(seconds) // 60


async def fleet_page(page: Any, url: str, seam: Seam) -> int:
    """Open the dashboard; the server's minute it was drawn in."""
    while True:
        before = await server_minute(seam)
        await page.goto(f"{url}/fleet")
        if await server_minute(seam) == before:
            return before


async def bars(page: Any, chart: str, series: str) -> list[tuple[int, int]]:
    """(minutes ago, value) of each bar of `series`, oldest first."""
    found = []
    for rect in await page.locator(f"#{chart} rect.bar.{series}").all():
        minute = int(await rect.get_attribute("data-minute"))
        found.append((minute, int(await rect.get_attribute("data-value"))))
    return sorted(found, reverse=True)


async def test_the_charts_draw_a_known_hour(
    backend: Backend, seam: Seam, browser: Any, tmp_path: Path
) -> None:
    """`askq worker web` and `askq worker auto` live, a sweeper, a known hour of counts
    and two questions answered now: each chart has the bars and labels they make."""
    async with processes() as started:
        url = await web_process(backend, started, "--priority", "1")
        started.append(await _start(backend, "worker", "auto", "--priority", "0"))
        started.append(await _start(backend, "sweeper"))
        planted = await plant_hour(seam)
        await asyncio.sleep(1.0)  # auto registers
        for question in ("Restart the ingest workers?", "Rotate the staging API keys?"):
            asker = await ask_process(backend, started, question, "Yes (Recommended)", "No")
            assert "Yes (Recommended)" in await _output(asker)
        page = await signed_in_page(browser, url)
        now = await fleet_page(page, url, seam)
        shift = now - planted  # 1 if a minute turned since the hour was planted

        # Questions per minute: the planted minutes, and the two just asked and answered
        asked: Counter[int] = Counter({ago + shift: n for ago, n in ASKED.items()})
        answered: Counter[int] = Counter(
            {ago + shift: sum(a[3] for a in ANSWERS[ago]) for ago in ANSWERS}
        )
        for row in await recent_in_shards(seam, 10):
            asked[now - (row.created_ms or 0) // MINUTE_MS] += 1
            answered[now - row.settled_ms // MINUTE_MS] += 1
        assert await bars(page, "chart-activity", "asked") == sorted(asked.items(), reverse=True)
        assert await bars(page, "chart-activity", "answered") == sorted(
            answered.items(), reverse=True
        )
        legend = page.locator("#chart-activity ul.legend")
        assert await legend.locator("[data-total=asked]").inner_text() == str(sum(asked.values()))
        ticks = await page.locator("#chart-activity text.tick.x").all_text_contents()
        assert ticks == [f"{n} min ago" for n in (50, 40, 30, 20, 10)] + ["now"]
        # the count axis ends at or above the busiest minute, bars in proportion
        y_labels = await page.locator("#chart-activity text.tick.y").all_text_contents()
        y_ticks = [int(t) for t in y_labels]
        assert y_ticks[0] == 0 and y_ticks[-1] >= max(answered.values())
        heights = {}
        for rect in await page.locator("#chart-activity rect.bar.answered").all():
            heights[int(await rect.get_attribute("data-value"))] = float(
                await rect.get_attribute("height")
            )
        (low, h_low), (high, h_high) = min(heights.items()), max(heights.items())
        assert abs(h_high / h_low - high / low) < 0.05

        # Escalations and timeouts: the minutes they happened, stacked
        assert await bars(page, "chart-trouble", "escalated") == [(41 + shift, 2)]
        assert await bars(page, "chart-trouble", "timed-out") == [(41 + shift, 1), (12 + shift, 1)]
        assert await bars(page, "chart-trouble", "failed") == [(12 + shift, 1)]
        tip = page.locator("#chart-trouble rect.bar.timed-out title").last
        assert "1 answered with the ask's default" in str(await tip.text_content())

        # Time to answer by group: a row per group, by tier, with both bars
        rows = page.locator("#chart-times g.row")
        assert [await r.get_attribute("data-label") for r in await rows.all()] == ["auto", "web"]
        web_row = page.locator('#chart-times g.row[data-label="web"]')
        web_buckets: Counter[int] = Counter()
        for answers in ANSWERS.values():
            for group, _, bucket, n in answers:
                if group == "web":
                    web_buckets[bucket] += n
        median = float(await web_row.locator("rect.bar.median").get_attribute("data-value"))
        p90 = float(await web_row.locator("rect.bar.p90").get_attribute("data-value"))
        assert median == pytest.approx(percentile(web_buckets, 0.5), abs=0.001)
        assert p90 == pytest.approx(percentile(web_buckets, 0.9), abs=0.001)
        assert 2 ** (52 / 4) / 1000 < median < p90 < 2 ** (66 / 4) / 1000  # 8 s .. 78 s
        figures = str(await web_row.locator("text.value").text_content())
        assert figures == f"{duration(median)} · {duration(p90)}"
        web_n = web_buckets.total()
        assert f"tier 1 · {web_n} answers · 2 escalations" == (
            await web_row.locator("text.label-note").text_content()
        )
        time_ticks = await page.locator("#chart-times text.tick.x").all_text_contents()
        assert time_ticks[0] == "1 ms" and "1 min" in time_ticks

        # Who answers: tier 0 (auto, with the two now) and tier 1 (web)
        tiers = await page.locator("#chart-tiers text.value").all_text_contents()
        auto_n = sum(a[3] for answers in ANSWERS.values() for a in answers if a[0] == "auto")
        auto_n += len(await recent_in_shards(seam, 10))  # the two asked now
        total = auto_n + web_n
        assert tiers == [
            f"{100 * auto_n / total:.0f} % · {auto_n}",
            f"{100 * web_n / total:.0f} % · {web_n}",
        ]
        # The recent settlements show the question itself
        assert "Rotate the staging API keys?" in await page.inner_text("table.settlements")
        await page.screenshot(path=str(_shot(tmp_path, "web-fleet.png")), full_page=True)


async def test_the_charts_follow_an_answer_live(seam: Seam, browser: Any, tmp_path: Path) -> None:
    """An empty hour says so; a question asked shows on the open page, and its answer
    too (bars, the group's row, the tier's share), without a reload."""
    desk = MemoryAnswerer(by="console:ops")
    async with (
        web_replica(seam, serve=True, priority=5) as (_, web),
        running(seam, desk, "desk", priority=0),
    ):
        url = f"http://127.0.0.1:{web.port}"
        page = await signed_in_page(browser, url)
        await page.goto(f"{url}/fleet")
        loads: list[str] = []
        page.on("load", lambda _: loads.append("load"))
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        activity = page.locator("#chart-activity")
        assert (
            await activity.locator("text.empty").text_content() == "No questions in the last hour."
        )
        assert await page.locator("#chart-times text.empty").text_content() == (
            "No answers in the last hour."
        )
        await page.screenshot(path=str(tmp_path / "fleet-empty.png"), full_page=True)

        asking = asyncio.create_task(seam.ask({"questions": [CONFIRM]}, CALLER))
        offer = await desk.next_presented()
        await expect(activity.locator("rect.bar.asked")).to_have_count(1, timeout=5000)
        assert await activity.locator("rect.bar.answered").count() == 0
        assert await activity.locator("rect.bar.asked").get_attribute("data-minute") in ("0", "1")

        await desk.answer(offer.request_id, NO)
        await asking
        await expect(activity.locator("rect.bar.answered")).to_have_count(1, timeout=5000)
        await expect(activity.locator("[data-total=answered]")).to_have_text("1")
        await expect(activity.locator("text.empty")).to_have_count(0)
        row = page.locator('#chart-times g.row[data-label="desk"]')
        await expect(row.locator("rect.bar.median")).to_have_count(1)
        assert await row.locator("text.label-note").text_content() == "tier 0 · 1 answer"
        assert await page.locator("#chart-tiers text.value").all_text_contents() == ["100 % · 1"]
        await page.screenshot(path=str(tmp_path / "fleet-answered.png"), full_page=True)
        assert loads == []  # refreshed in place, not reloaded
        assert errors == []  # nothing refused by the CSP, no script errors
