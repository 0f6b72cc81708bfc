"""The email's answer link in a real browser (headless Chromium, tests/chromium.py),
opened exactly as the question email carries it, served by the email worker's own HTTP
endpoint."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from chromium import browser, needs_chromium
from conftest import SEED, Backend, running
from email_standin import SmtpSink, email_settings, sink

from askq import Caller, Seam
from askq.answerers.email import EmailAnswerer
from bench._redis_server import free_port

__all__ = ["browser", "sink"]  # the fixtures, imported so pytest finds them

pytestmark = needs_chromium


async def test_the_emails_link_clicked_in_chromium_answers_once(
    backend: Backend, seam: Seam, sink: SmtpSink, browser: Any
) -> None:
    port = free_port()
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
            assert len(link.group(1)) == len(base) + len("/a/") + 32  # short: its claims are stored
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
            shown = await page.inner_text("main")
            assert "This link has been used: a link answers once." in shown
            assert "Answered through a link in an email by alice@acme.example" in shown
            assert "email:" not in shown and "email-link" not in shown
            assert await page.locator("form.answer").count() == 0
