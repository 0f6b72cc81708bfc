"""Slack settings: routes, allowlists and receivers, checked at start-up (no Redis)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from askq import AskError, ErrorCode
from askq.answerers.slack import SlackConfig, SlackSettings, parse_routes

ROUTES = json.dumps(
    {
        "*": "C0GENERAL",
        "tenant=acme": {"channel": "C0ACME", "allow": ["U0ALICE", "U0BOB"]},
        "tenant=beta-*,env=prod": "U0ONCALL",
    }
)


def settings(**changes: Any) -> SlackSettings:
    base: dict[str, Any] = {
        "bot_token": "xoxb-1",
        "app_token": "xapp-1",
        "routes": ROUTES,
        "allowlist": "U0ALICE, U0CAROL",
    }
    changed = {name.removeprefix("slack_"): value for name, value in changes.items()}
    return SlackSettings(**{**base, **changed})


def config_error(**changes: Any) -> str:
    with pytest.raises(AskError) as info:
        SlackConfig.from_settings(settings(**changes))
    assert info.value.code is ErrorCode.CONFIG_ERROR
    return info.value.message


def test_first_matching_route_wins_and_the_default_goes_last() -> None:
    routes = SlackConfig.from_settings(settings()).routes
    acme = routes.match({"tenant": "acme", "env": "prod"})
    assert acme is not None and acme.channel == "C0ACME"
    assert acme.allows("U0BOB") and not acme.allows("U0CAROL")  # its own list, not the default
    beta = routes.match({"tenant": "beta-eu", "env": "prod"})
    assert beta is not None and beta.channel == "U0ONCALL"
    # a DM route: the default allowlist, and the person it goes to
    assert beta.allows("U0CAROL") and beta.allows("U0ONCALL") and not beta.allows("U0BOB")
    other = routes.match({"tenant": "beta-eu"})  # env missing
    assert other is not None and other.channel == "C0GENERAL"
    assert routes.match({}) is other


def test_no_default_means_decline() -> None:
    routes = parse_routes('{"tenant=acme": "C0ACME"}', "*")
    assert routes.match({"tenant": "other"}) is None
    route = routes.match({"tenant": "acme"})
    assert route is not None and route.allows("U0ANYONE")  # "*": anyone who sees it


def test_socket_mode_is_the_default_with_an_app_token() -> None:
    config = SlackConfig.from_settings(settings())
    assert config.socket_mode and config.app_token == "xapp-1"
    http = SlackConfig.from_settings(
        settings(slack_socket_mode=False, slack_signing_secret="s3cret")
    )
    assert not http.socket_mode and http.signing_secret == "s3cret"
    no_app = SlackConfig.from_settings(settings(slack_app_token=None, slack_signing_secret="s"))
    assert not no_app.socket_mode


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASKQ_SLACK_BOT_TOKEN", "xoxb-env")
    monkeypatch.setenv("ASKQ_SLACK_SIGNING_SECRET", "env-secret")
    monkeypatch.setenv("ASKQ_SLACK_ROUTES", '{"*": "C0ENV"}')
    monkeypatch.setenv("ASKQ_SLACK_ALLOWLIST", '["U0ENV"]')
    monkeypatch.setenv("ASKQ_SLACK_HTTP_PORT", "8080")
    config = SlackConfig.from_settings(SlackSettings.from_env())
    assert (config.bot_token, config.signing_secret, config.http_port) == (
        "xoxb-env",
        "env-secret",
        8080,
    )
    assert not config.socket_mode
    assert "env-secret" not in repr(SlackSettings())  # secrets stay out of logs


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"slack_bot_token": None}, "ASKQ_SLACK_BOT_TOKEN is not set"),
        ({"slack_bot_token": "  "}, "ASKQ_SLACK_BOT_TOKEN is not set"),
        ({"slack_bot_token": "xapp-1"}, "ASKQ_SLACK_BOT_TOKEN: expected a bot token"),
        ({"slack_app_token": "xoxb-2"}, "ASKQ_SLACK_APP_TOKEN: expected an app-level token"),
        ({"slack_app_token": None}, "ASKQ_SLACK_SIGNING_SECRET is not set"),
        (
            {"slack_app_token": None, "slack_socket_mode": True},
            "ASKQ_SLACK_APP_TOKEN is not set",
        ),
        (
            {"slack_socket_mode": False},
            "ASKQ_SLACK_SIGNING_SECRET is not set",
        ),
        ({"slack_api_url": "slack.com/api"}, "ASKQ_SLACK_API_URL: 'slack.com/api'"),
        ({"slack_routes": ""}, "ASKQ_SLACK_ROUTES is not set"),
        ({"slack_routes": "{nope"}, "ASKQ_SLACK_ROUTES: not valid JSON"),
        ({"slack_routes": "[]"}, "ASKQ_SLACK_ROUTES: expected a non-empty JSON object"),
        ({"slack_routes": '{"tenant": "C0A"}'}, "ASKQ_SLACK_ROUTES['tenant']: a key is"),
        ({"slack_routes": '{"*": "general"}'}, "ASKQ_SLACK_ROUTES['*'].channel: 'general'"),
        ({"slack_routes": '{"*": 3}'}, "ASKQ_SLACK_ROUTES['*']: expected a channel id"),
        (
            {"slack_routes": '{"*": {"channel": "C0A", "alow": []}}'},
            "ASKQ_SLACK_ROUTES['*']: unknown field(s) alow",
        ),
        (
            {"slack_routes": '{"*": {"channel": "C0A", "allow": ["alice"]}}'},
            "ASKQ_SLACK_ROUTES['*'].allow: 'alice' is not a Slack user id",
        ),
        (
            {"slack_routes": '{"*": "C0A"}', "slack_allowlist": ""},
            "ASKQ_SLACK_ROUTES['*']: nobody may answer in C0A",
        ),
        ({"slack_allowlist": "[U0A"}, "ASKQ_SLACK_ALLOWLIST: not valid JSON"),
        ({"slack_allowlist": "U0A, bob"}, "ASKQ_SLACK_ALLOWLIST: 'bob' is not a Slack user id"),
    ],
)
def test_bad_settings_name_the_setting(changes: dict[str, Any], message: str) -> None:
    assert message in config_error(**changes)


def test_a_route_channel_may_be_a_name() -> None:
    route = parse_routes('{"*": "#askq-questions"}', "*").match({})
    assert route is not None and route.channel == "#askq-questions"
