"""The web inbox in a real browser (headless Chromium, tests/chromium.py), against
`askq worker web` running as its own process, with questions asked by `askq ask`
processes.

Set ASKQ_SCREENSHOTS=docs to write the README's screenshots into docs/.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from chromium import browser, needs_chromium, playwright_api
from conftest import ROOT, Backend, running
from web_helpers import SECRET, TOKENS, USERS

from askq import SignedLinks
from askq.answerers.memory import MemoryAnswerer
from bench._redis_server import free_port

__all__ = ["browser"]  # the fixture, imported so pytest finds it

ASKQ = [sys.executable, "-m", "askq"]
PIPE = asyncio.subprocess.PIPE

pytestmark = needs_chromium


def _shot(tmp_path: Path, name: str) -> Path:
    target = os.environ.get("ASKQ_SCREENSHOTS")
    return (ROOT / target / name) if target else tmp_path / name


async def _start(backend: Backend, *args: str, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *ASKQ,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=PIPE,
        stderr=PIPE,
        env=backend.env(**env),
    )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def processes() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            await _stop(proc)


async def web_worker(
    backend: Backend, started: list[asyncio.subprocess.Process], *flags: str
) -> str:
    """`askq worker web` as a process; its base URL once it is ready."""
    port = free_port()
    proc = await _start(
        backend,
        "worker",
        "web",
        *flags,
        ASKQ_WEB_SECRET=SECRET,
        ASKQ_WEB_USERS=USERS,
        ASKQ_WEB_PORT=str(port),
    )
    started.append(proc)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            if proc.returncode is not None:
                raise AssertionError((await proc.stderr.read()).decode())  # type: ignore[union-attr]
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return url
            await asyncio.sleep(0.1)
    raise AssertionError("askq worker web did not become ready")


async def ask_process(
    backend: Backend, started: list[asyncio.subprocess.Process], question: str, *options: str
) -> asyncio.subprocess.Process:
    args = ["ask", "-q", question, "--header", "Deploy", "--id", "go", "--agent", "release-bot"]
    for option in options:
        args += ["-o", option]
    proc = await _start(backend, *args, "--scope", "team=platform", "--turn", question[:20])
    started.append(proc)
    return proc


async def signed_in_page(browser: Any, url: str, user: str = "alice") -> Any:
    page = await browser.new_page(viewport={"width": 1100, "height": 720})
    await page.goto(url + "/")
    assert "/signin" in page.url
    await page.fill("input[name=token]", TOKENS[user])
    await page.click("button.primary")
    await page.wait_for_selector("#live[data-state=live]")
    return page


async def _output(proc: asyncio.subprocess.Process) -> str:
    out, err = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


async def test_sign_in_see_a_question_arrive_answer_it(
    backend: Backend, browser: Any, tmp_path: Path
) -> None:
    async with processes() as started:
        url = await web_worker(backend, started)
        page = await signed_in_page(browser, url)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        assert await page.inner_text("#empty") == "Nothing is waiting for an answer."
        # Asked by another process while the page is open: it appears without a reload.
        asker = await ask_process(
            backend,
            started,
            "Roll out build 4127 to production? <b>not bold</b>",
            "Yes, roll out (Recommended)|Canary passed; error rate 0.02 %",
            "No, hold it|Keep the current build",
        )
        item = page.locator("li.item").first
        await item.wait_for(timeout=5000)
        assert "<b>not bold</b>" in await item.inner_text()  # agent text shown as text
        await _ask_more(backend, started)
        # (wait_for_function would need eval, which the page's CSP refuses)
        await playwright_api.expect(page.locator("li.item")).to_have_count(3, timeout=5000)
        await page.screenshot(path=str(_shot(tmp_path, "web-inbox.png")))
        await page.locator("li.item", has_text="Roll out build 4127").locator("a").click()
        await page.wait_for_selector("form.answer")
        # Sent with nothing chosen: told what to do, in the page's own terms.
        await page.click("button.primary")
        problem = await page.locator(".field-error").inner_text()
        assert problem == "Choose one of the options, or choose Other… and write your own answer."
        shown = await page.inner_text("main")
        assert '"go"' not in shown and "custom text" not in shown
        await page.screenshot(path=str(tmp_path / "web-answer-invalid.png"))
        assert all("422" in e for e in errors)  # the browser notes the page's own status
        errors.clear()
        await page.goto(page.url)  # the form afresh, for the screenshot
        await page.check("text=No, hold it")
        await page.screenshot(path=str(_shot(tmp_path, "web-answer.png")))
        await page.click("button.primary")
        await page.wait_for_selector("#final")
        assert "Answered in the web inbox by alice" in await page.inner_text("#final")
        assert await _output(asker) == '{"answers":[{"id":"go","selected":["No, hold it"]}]}'
        assert errors == []  # nothing refused by the CSP, no script errors


async def _ask_more(backend: Backend, started: list[asyncio.subprocess.Process]) -> None:
    """Two more questions, so the inbox screenshot shows a list."""
    await ask_process(
        backend,
        started,
        "Drop the staging database snapshot from Tuesday?",
        "Keep it (Recommended)",
        "Drop it",
    )
    await ask_process(
        backend,
        started,
        "Which region should the new cluster go to?",
        "eu-west-1 (Recommended)|Closest to most users",
        "us-east-1",
    )


async def test_a_question_answered_elsewhere_leaves_with_its_reason(
    backend: Backend, browser: Any, tmp_path: Path
) -> None:
    """The web group holds it first; it escalates to `askq worker auto` in the next
    tier, which answers: the item leaves the open page with the reason, and its page
    then shows auto's answer."""
    async with processes() as started:
        url = await web_worker(backend, started, "--escalate-after", "1.5")
        started.append(await _start(backend, "worker", "auto", "--priority", "5"))
        started.append(await _start(backend, "sweeper"))
        await asyncio.sleep(1.0)  # the auto group registers
        page = await signed_in_page(browser, url)
        asker = await ask_process(
            backend, started, "Restart the ingest workers?", "Yes (Recommended)", "No"
        )
        item = page.locator("li.item").first
        await item.wait_for(timeout=5000)
        request_id = await item.get_attribute("data-id")
        await page.wait_for_selector("li.item.gone", timeout=10000)
        assert await item.locator(".reason").inner_text() == "escalated to another answerer"
        assert await _output(asker) == '{"answers":[{"id":"go","selected":["Yes (Recommended)"]}]}'
        await page.wait_for_selector("li.item", state="detached", timeout=15000)
        assert await page.inner_text("#count") == "0"
        await page.goto(f"{url}/q/{request_id}")
        assert "Answered by rules (policy=recommended)" in await page.inner_text("#final")
        # The dashboard shows both groups live, and the deployment's settlement.
        await page.goto(f"{url}/fleet")
        body = await page.inner_text("#fleet")
        assert "answered by rules (policy=recommended)" in body
        # (the README's docs/web-fleet.png: test_web_fleet_browser.py, a fuller hour)
        await page.screenshot(path=str(tmp_path / "web-fleet.png"), full_page=True)


async def test_a_signed_link_answers_once(backend: Backend, browser: Any, tmp_path: Path) -> None:
    async with processes() as started:
        url = await web_worker(backend, started)
        watcher = await signed_in_page(browser, url)
        asker = await ask_process(
            backend,
            started,
            "Approve the quarterly invoice run?",
            "Approve (Recommended)",
            "Reject",
        )
        item = watcher.locator("li.item").first
        await item.wait_for(timeout=5000)
        request_id = await item.get_attribute("data-id")
        assert request_id
        token = SignedLinks([SECRET]).mint(
            request_id, "web", "finance@example.com", ttl=600, question_id="go", option="Reject"
        )
        # A fresh browser context: no session, the link is the only proof.
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(f"{url}/a/{token}")
        assert await page.is_checked("text=Reject")
        await page.click("button.primary")
        await page.wait_for_selector("#final")
        assert "your answer was recorded" in await page.inner_text("#final")
        assert await _output(asker) == '{"answers":[{"id":"go","selected":["Reject"]}]}'
        # The watching inbox sees it leave, saying how it was answered and by whom.
        await watcher.wait_for_selector("li.item.gone", timeout=5000)
        reason = await item.locator(".reason").inner_text()
        assert reason == "answered through a link by finance@example.com"
        # Opened again: already answered, and nothing to submit.
        await page.goto(f"{url}/a/{token}")
        shown = await page.inner_text("main")
        assert "Answered through a link by finance@example.com" in shown
        assert await page.locator("form.answer").count() == 0
        await page.screenshot(path=str(tmp_path / "link-used.png"))
        # A link cut short or altered: a page that says what to do, not an exception.
        await page.goto(f"{url}/a/{token[:-4]}")
        assert await page.inner_text("h1") == "This link does not work"
        shown = await page.inner_text("main")
        assert "Open it again from the message it came in" in shown
        assert "forged" not in shown and "group" not in shown
        await page.screenshot(path=str(tmp_path / "link-broken.png"))
        await context.close()


async def test_a_question_answered_by_another_group_of_the_tier_leaves_with_its_reason(
    backend: Backend, browser: Any
) -> None:
    """Two groups of tier 0 both accept: the web inbox (its own process) and an
    in-process group whose human answers first. The open page drops the item with who
    answered it, without a reload, and its page then shows the other group's answer."""
    oncall = MemoryAnswerer(by="console:ops")
    async with backend.seam() as seam, running(seam, oncall, "oncall", priority=0):
        async with processes() as started:
            url = await web_worker(backend, started)
            page = await signed_in_page(browser, url)
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            asker = await ask_process(
                backend, started, "Rotate the API keys tonight?", "Yes (Recommended)", "No"
            )
            item = page.locator("li.item").first
            await item.wait_for(timeout=5000)
            request_id = await item.get_attribute("data-id")
            offer = await oncall.next_presented(timeout=10)
            assert offer.request_id == request_id  # the same request, held by both groups
            await oncall.answer(offer.request_id, [{"id": "go", "selected": ["No"]}])
            await page.wait_for_selector("li.item.gone", timeout=5000)
            assert await item.locator(".reason").inner_text() == "answered in a terminal by ops"
            assert await _output(asker) == '{"answers":[{"id":"go","selected":["No"]}]}'
            await page.wait_for_selector("li.item", state="detached", timeout=15000)
            assert await page.inner_text("#count") == "0"
            await page.goto(f"{url}/q/{request_id}")
            assert "Answered in a terminal by ops" in await page.inner_text("#final")
            assert errors == []
