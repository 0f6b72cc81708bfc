"""The email's answer link in a real browser: Debian's headless Chromium driven by
Playwright (`executable_path`, never `playwright install`), opening the link exactly as
the question email carries it, served by the email worker's own HTTP endpoint."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SEED, Backend, running
from email_standin import SmtpSink, email_settings, sink

from askq import Caller, Seam
from askq.answerers.email import EmailAnswerer

__all__ = ["sink"]  # the fixture, imported so pytest finds it

playwright_api = pytest.importorskip("playwright.async_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (apt-get install chromium)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


async def test_the_emails_link_clicked_in_chromium_answers_once(
    backend: Backend, seam: Seam, sink: SmtpSink, browser: Any
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    settings = email_settings(sink, link_base_url=base, http_port=port)
    async with backend.seam() as worker_seam:
        async with running(worker_seam, EmailAnswerer(settings=settings), "email", 0):
            task = asyncio.create_task(
                seam.ask(SEED, Caller(agent_id="agent-7", turn_id="t"), scope={"tenant": "solo"})
            )
            (question,) = await sink.wait(1)
            link = re.search(r'href="([^"]+)"[^>]*>No, keep them</a>', question.html())
            assert link is not None and link.group(1).startswith(base + "/a/")
            page = await (await browser.new_context()).new_page()
            await page.goto(link.group(1))  # GET: the confirm page, the option pre-selected
            assert await page.is_checked("text=No, keep them")
            assert not task.done()
            await page.click("button.primary")  # POST: answers
            await page.wait_for_selector("#final")
            assert "your answer was recorded" in await page.inner_text("#final")
            answers = await asyncio.wait_for(task, 10)
            assert (
                answers.to_json() == '{"answers":[{"id":"cleanup","selected":["No, keep them"]}]}'
            )
            await page.goto(link.group(1))  # opened again: answered, nothing to submit
            assert "already answered by email:alice@acme.example" in await page.inner_text("main")
            assert await page.locator("form.answer").count() == 0
