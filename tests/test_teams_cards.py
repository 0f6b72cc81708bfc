"""The Teams answerer's pieces on their own: cards within Teams' size at askq's
limits, the settings' errors naming the variable, the routes' targets and allowlists,
and the signing keys fetched again when Microsoft rotates them (at most once a minute
for keys nobody published)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from teams_standin import (
    ALICE,
    APP_ID,
    TEAMS_MAX_BYTES,
    SigningKey,
    TeamsStandIn,
    activity,
    standin,
)

from askq import AskError, AskRequest, Caller, ErrorCode
from askq.answerers.teams import Outcome, TeamsConfig, TeamsSettings, final_card, question_card
from askq.answerers.teams._auth import BotTokens, OpenIdKeys, Unauthenticated
from askq.answerers.teams._cards import CARD_BUDGET, size
from askq.answerers.teams._routes import parse_routes

__all__ = ["standin"]

WIDE = "界"  # three bytes in UTF-8


def request_of(questions: list[dict[str, Any]], caller: Caller | None = None) -> AskRequest:
    return AskRequest.model_validate(
        {
            "id": "0" * 32,
            "questions": questions,
            "caller": (caller or Caller(agent_id="a" * 200, turn_id="t" * 200)).model_dump(),
            "scope": {},
            "created_ms": 0,
        }
    )


def worst(multi: bool) -> list[dict[str, Any]]:
    return [
        {
            "id": f"q{n}",
            "header": WIDE * 40,
            "question": WIDE * 2000,
            "multiSelect": multi,
            "options": [
                {"label": f"{i}" + WIDE * 119, "description": WIDE * 500} for i in range(10)
            ],
        }
        for n in range(8)
    ]


@pytest.mark.parametrize("multi", [False, True])
def test_the_largest_request_fits_a_teams_message(multi: bool) -> None:
    request = request_of(worst(multi))
    card = question_card(request, "teams")
    assert size(card) <= CARD_BUDGET < TEAMS_MAX_BYTES
    text = json.dumps(card, ensure_ascii=False)
    assert text.count(WIDE * 40) >= 8  # every header whole
    answers = [{"id": f"q{n}", "selected": [], "custom": WIDE * 4000} for n in range(8)]
    outcome = Outcome.from_json(json.dumps({"state": "ANSWERED", "name": "A", "answers": answers}))
    final = final_card(request, outcome)
    assert size(final) <= CARD_BUDGET
    assert json.dumps(final, ensure_ascii=False).count(WIDE * 40) >= 8


def test_a_small_request_is_shown_whole() -> None:
    question = {
        "id": "q",
        "header": "Deploy",
        "question": "Ship it?\n\nIt is Friday.",
        "options": [{"label": "Yes", "description": "Now."}, {"label": "No"}],
    }
    card = question_card(request_of([question]), "teams")
    text = json.dumps(card, ensure_ascii=False)
    for part in ("Deploy", "Ship it?", "It is Friday.", "Now.", "Yes", "No"):
        assert part in text
    assert "…" not in text


SETTINGS = {
    "app_id": APP_ID,
    "app_password": "secret",
    "tenant_id": "11111111-2222-4333-8444-555555555555",
    "routes": json.dumps({"*": "19:abc@thread.tacv2"}),
    "allowlist": "*",
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"app_id": ""}, "ASKQ_TEAMS_APP_ID is not set"),
        ({"app_id": "bot"}, "ASKQ_TEAMS_APP_ID: 'bot' is not a Microsoft App ID"),
        ({"app_password": ""}, "ASKQ_TEAMS_APP_PASSWORD is not set"),
        ({"tenant_id": ""}, "ASKQ_TEAMS_TENANTS is not set"),
        ({"tenants": "acme"}, "ASKQ_TEAMS_TENANTS: 'acme' is not an Azure AD tenant id"),
        ({"cloud": "Mars"}, "ASKQ_TEAMS_CLOUD: Unknown cloud environment: 'Mars'"),
        ({"login_url": "http://x"}, "ASKQ_TEAMS_LOGIN_URL: the token authority must be an https"),
        ({"routes": ""}, "ASKQ_TEAMS_ROUTES is not set"),
        ({"routes": '{"*": "general"}'}, "is not a Teams conversation id"),
        ({"routes": '{"*": {"user": "al@x.com"}}'}, "is not an Azure AD object id"),
        ({"routes": '{"*": {"conversation": "19:a@thread.v2", "to": 1}}'}, "unknown field(s) to"),
        (
            {"routes": '{"*": {"conversation": "19:a@thread.v2", "user": "x"}}'},
            'give one of "conversation"',
        ),
        ({"allowlist": ""}, "nobody may answer in 19:abc@thread.tacv2"),
        ({"allowlist": "al"}, "'al' is not an Azure AD object id (a GUID) or a user principal"),
    ],
)
def test_bad_settings_name_the_setting(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(AskError) as err:
        TeamsConfig.from_settings(TeamsSettings(**{**SETTINGS, **changes}))
    assert err.value.code is ErrorCode.CONFIG_ERROR
    assert message in err.value.message, err.value.message


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**SETTINGS, "tenants": "*", "cloud": "USGov"}.items():
        monkeypatch.setenv(f"ASKQ_TEAMS_{name.upper()}", value)
    config = TeamsConfig.from_settings(TeamsSettings.from_env())
    assert config.app_id == APP_ID and config.tenant_allowed("anything")
    assert config.issuer == "https://api.botframework.us"
    assert config.login_url == "https://login.microsoftonline.us"


def test_routes_targets_and_allowlists() -> None:
    carol = "cccccccc-0000-4000-8000-000000000003"
    routes = parse_routes(
        json.dumps(
            {
                "team=a": {"conversation": "19:a@thread.tacv2", "allow": ["Al@Contoso.com"]},
                "team=b": carol.upper(),
                "*": "19:general@thread.tacv2",
            }
        ),
        ALICE.object_id.upper(),
    )
    a = routes.match({"team": "a"})
    assert a is not None and a.kind == "conversation" and a.needs_upn
    assert a.allows("someone", "al@contoso.COM") and not a.allows(ALICE.object_id)
    b = routes.match({"team": "b"})
    assert b is not None and (b.kind, b.target) == ("user", carol)
    assert b.allows(carol) and b.allows(ALICE.object_id)  # the user, and the default list
    default = routes.match({})
    assert default is not None and default.allows(ALICE.object_id) and not default.needs_upn


async def test_keys_are_fetched_again_for_a_rotated_key_at_most_once_a_minute(
    standin: TeamsStandIn,
) -> None:
    """A token signed with a key published after the keys were read makes the
    validator read them again (Microsoft rotates its keys); a flood of tokens naming
    unknown keys reads them at most once a minute."""
    now = [1000.0]
    async with httpx.AsyncClient() as http:
        keys = OpenIdKeys(standin.openid_url, http, clock=lambda: now[0])
        tokens = BotTokens(keys, app_id=APP_ID, issuer="https://api.botframework.com")
        body = activity(standin, "message", ALICE)
        await tokens.check("Bearer " + standin.token_for(body["serviceUrl"]), body)
        assert standin.metadata_reads == 1
        standin.key = SigningKey("rotated-key", ["msteams"])  # Microsoft publishes a new key
        now[0] += 120
        await tokens.check("Bearer " + standin.token_for(body["serviceUrl"]), body)
        assert standin.metadata_reads == 2
        for n in range(20):
            forged = SigningKey(f"made-up-{n}", ["msteams"])
            with pytest.raises(Unauthenticated, match="unknown key"):
                await tokens.check(
                    "Bearer " + standin.token_for(body["serviceUrl"], key=forged), body
                )
        assert standin.metadata_reads == 2  # within the minute: not read again
        await asyncio.sleep(0)


def test_no_agent_text_in_a_markdown_element() -> None:
    question = {"id": "q", "header": "**H**", "question": "[x](y)", "options": []}
    for card in (
        question_card(request_of([question]), "g"),
        final_card(request_of([question]), Outcome("CANCELLED", why="**why**")),
    ):
        assert '"TextBlock"' not in json.dumps(card)
