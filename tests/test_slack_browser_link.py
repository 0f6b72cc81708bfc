"""Slack's "Open in browser": with the web inbox's URL configured, each question message
carries a link button. A DM's is a signed single-question link for that Slack user,
which the web inbox's routes answer with exactly once; a channel's goes to the
request's page, behind the web inbox's sign-in (a channel post is seen by many)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import Backend
from slack_standin import ALICE, SlackStandIn, block_actions, slack_settings, standin
from test_slack_http import HOSTILE, REGION, agent_markup, answered, asking, click, slack_worker
from web_helpers import SECRET, client_for, csrf_of, sign_in, web_replica

from askq import AskError, ErrorCode, SignedLinks
from askq.answerers.slack._config import SlackConfig

__all__ = ["standin"]

WEB_URL = "https://askq.example.com/inbox"
DM = {"tenant": "dm"}  # routed to UCAROL's DM
LINKED = {"web_url": WEB_URL + "/", "link_secret": SECRET}


def open_button(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    found = [
        e
        for b in blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e.get("action_id") == "askq-open"
    ]
    assert len(found) == 1, blocks
    return found[0]


async def test_a_dm_carries_a_signed_link_that_answers_once(
    backend: Backend, standin: SlackStandIn
) -> None:
    async with backend.seam() as seam, web_replica(seam) as (_, web):
        async with slack_worker(backend, standin, **LINKED):
            task = asking(seam, {"questions": [REGION]}, scope=DM)
            message = await standin.message()
            button = open_button(message.blocks)
            assert button["type"] == "button" and button["text"]["text"] == "Open in browser"
            url = urlsplit(button["url"])
            assert (url.scheme, url.netloc) == ("https", "askq.example.com")
            assert url.path.startswith("/inbox/a/") and not url.query
            token = url.path.removeprefix("/inbox/a/")
            claims = SignedLinks([SECRET]).check(token, group="web")
            assert (claims.request_id, claims.recipient) == (message.request_id, "slack:UCAROL")
            async with client_for(web) as browser:
                page = await browser.get(f"/a/{token}")  # the web app's own route
                assert page.status_code == 200 and "Where should it deploy?" in page.text
                assert "for <span class=\"recipient\">UCAROL in Slack</span>" in page.text
                done = await browser.post(
                    f"/a/{token}", data={"csrf": csrf_of(page.text), "q0": "opt1"}
                )
                assert done.status_code == 200 and "your answer was recorded" in done.text
                assert await answered(task) == (
                    '{"answers":[{"id":"region","selected":["us-east-1"]}]}'
                )
                again = await browser.post(
                    f"/a/{token}", data={"csrf": csrf_of(page.text), "q0": "opt0"}
                )
                assert again.status_code == 410 and "Already answered" in again.text
                assert "Answered through a link from Slack by UCAROL" in again.text
            settlement = await seam.settlement(message.request_id)
            assert settlement is not None and settlement.by == "link:slack:UCAROL"
            # Slack's message shows the web's answer, and how it was given.
            update = (await standin.wait_for("chat.update", 1))[0]
            assert "us-east-1" in str(update["blocks"])
            assert "through a link from Slack by UCAROL" in str(update["blocks"])


async def test_a_channel_post_links_to_the_page_behind_sign_in(
    backend: Backend, standin: SlackStandIn
) -> None:
    async with backend.seam() as seam, web_replica(seam) as (_, web):
        async with slack_worker(backend, standin, **LINKED) as slack:
            task = asking(seam, {"questions": [HOSTILE]})  # tenant=acme: a channel
            message = await standin.message()
            rid = message.request_id
            assert open_button(message.blocks)["url"] == f"{WEB_URL}/q/{rid}"
            assert agent_markup(standin) == []  # agent text stays escaped beside it
            # Slack reports the link button's click too: it answers nothing.
            await click(slack, block_actions(message, ALICE, "askq-open"))
            async with client_for(web) as browser:
                anonymous = await browser.get(f"/q/{rid}")
                assert anonymous.status_code in (302, 303)
                assert "/signin" in anonymous.headers["location"]
                await sign_in(browser, "alice")
                page = await browser.get(f"/q/{rid}")
                assert page.status_code == 200 and 'class="answer"' in page.text
            assert not task.done()  # neither the click nor a page view answered it
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_without_a_web_url_there_is_no_button(
    backend: Backend, standin: SlackStandIn
) -> None:
    async with backend.seam() as seam, slack_worker(backend, standin):
        task = asking(seam, {"questions": [REGION]}, scope=DM)
        message = await standin.message()
        assert not [b for b in message.blocks if b.get("block_id", "").startswith("askq-open")]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_without_a_link_secret_a_dm_links_to_the_page(
    backend: Backend, standin: SlackStandIn
) -> None:
    async with backend.seam() as seam, slack_worker(backend, standin, web_url=WEB_URL):
        task = asking(seam, {"questions": [REGION]}, scope=DM)
        message = await standin.message()
        assert open_button(message.blocks)["url"] == f"{WEB_URL}/q/{message.request_id}"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"link_secret": SECRET}, "ASKQ_SLACK_WEB_URL"),
        ({"web_url": "ftp://askq.example.com"}, "ASKQ_SLACK_WEB_URL"),
        ({"web_url": 'https://x.example/"><script>'}, "ASKQ_SLACK_WEB_URL"),
        ({"web_url": WEB_URL, "link_secret": "short"}, "ASKQ_SLACK_LINK_SECRET"),
    ],
)
def test_bad_browser_settings_stop_the_worker(
    standin: SlackStandIn, extra: dict[str, str], named: str
) -> None:
    with pytest.raises(AskError) as caught:
        SlackConfig.from_settings(slack_settings(standin, **extra))
    assert caught.value.code is ErrorCode.CONFIG_ERROR and named in caught.value.message
