"""Socket Mode through the stand-in's WebSocket, and start-up failures."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest
from conftest import PYTHON, SEED, YES_JSON, Backend, running
from slack_standin import (
    ALICE,
    APP_TOKEN,
    SlackStandIn,
    block_actions,
    slack_settings,
    standin,
)

from askq import AskError, Caller, ErrorCode, Seam
from askq.answerers.slack import SlackAnswerer, SlackSettings

__all__ = ["standin"]  # the fixture, imported so pytest finds it

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")


def socket_settings(standin: SlackStandIn, **extra: Any) -> SlackSettings:
    socket_mode = {
        "slack_app_token": APP_TOKEN,
        "slack_socket_mode": None,  # the default: on, since the app token is set
        "slack_signing_secret": None,
    }
    return slack_settings(standin, **{**socket_mode, **extra})


async def test_a_click_over_socket_mode_answers(
    backend: Backend, seam: Seam, standin: SlackStandIn
) -> None:
    async with backend.seam() as worker_seam:
        slack = SlackAnswerer(settings=socket_settings(standin))
        async with running(worker_seam, slack, "slack"):
            await standin.wait_connected()
            assert slack.http_port is None  # no HTTP endpoint in Socket Mode
            assert standin.calls_to("apps.connections.open")
            task = asyncio.create_task(seam.ask(SEED, CALLER, scope={"tenant": "acme"}))
            message = await standin.message()
            # Malformed and foreign envelopes are acknowledged too, and change nothing.
            await standin.push({"type": "block_actions", "actions": 3})
            await standin.push({"event": {"type": "message"}}, kind="events_api")
            await standin.push(block_actions(message, ALICE, "askq.pick.0"))  # acked first
            assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
            update = (await standin.wait_for("chat.update"))[0]
            assert update["ts"] == message.ts
            assert len(standin.acks) == 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"slack_app_token": "xapp-wrong"}, "ASKQ_SLACK_APP_TOKEN: Slack refused to open"),
        ({"slack_bot_token": "xoxb-wrong"}, "ASKQ_SLACK_BOT_TOKEN: Slack refused the token"),
    ],
)
async def test_tokens_slack_refuses_stop_the_worker_at_start_up(
    backend: Backend, standin: SlackStandIn, changes: dict[str, Any], message: str
) -> None:
    async with backend.seam() as worker_seam:
        with pytest.raises(AskError) as info:
            slack = SlackAnswerer(settings=socket_settings(standin, **changes))
            async with running(worker_seam, slack, "slack"):
                pass
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert message in info.value.message
    assert standin.calls_to("chat.postMessage") == []


async def test_http_port_in_use_is_a_config_error(backend: Backend, standin: SlackStandIn) -> None:
    async with backend.seam() as first_seam:
        first = SlackAnswerer(settings=slack_settings(standin))
        async with running(first_seam, first, "slack"):
            port = first.http_port
            async with backend.seam() as second:
                with pytest.raises(AskError) as info:
                    clash = SlackAnswerer(settings=slack_settings(standin, http_port=port))
                    async with running(second, clash, "slack"):
                        pass
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert f"cannot listen on 127.0.0.1:{port}" in info.value.message


def test_askq_worker_slack_without_settings_says_what_is_missing(backend: Backend) -> None:
    result = subprocess.run(
        [PYTHON, "-m", "askq", "worker", "slack"],
        env=backend.env(ASKQ_SLACK_ROUTES='{"*": "C0A"}'),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 12, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "CONFIG_ERROR: ASKQ_SLACK_BOT_TOKEN is not set: the Slack answerer needs the app's"
        " bot token (xoxb-...)"
    )
