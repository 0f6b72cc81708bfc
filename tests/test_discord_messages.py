"""The Discord answerer's pieces on their own: messages within Discord's limits at
askq's own limits, requests Discord cannot carry declined (the waterfall moves on),
escaping that shows any text as written, the settings' errors naming the variable,
the routes' targets and allowlists, the signature check, the rate-limit memory."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any

import httpx
import pytest
from conftest import Backend, running
from discord_standin import (
    APP,
    CHANNEL,
    DiscordStandIn,
    discord_settings,
    message_problem,
    standin,
)

from askq import Answer, AskError, AskRequest, Caller, ErrorCode, Seam
from askq.answerers.discord import (
    DiscordAnswerer,
    DiscordConfig,
    DiscordSettings,
    Outcome,
    escape,
    final_message,
    fits,
    parse_routes,
    question_message,
)
from askq.answerers.discord._ids import MAX_CUSTOM_ID
from askq.answerers.discord._messages import CONTENT_MAX, length, modal
from askq.answerers.discord._rest import RateLimits, route_key
from askq.answerers.discord._verify import Unsigned, Verifier
from askq.answerers.memory import MemoryAnswerer

__all__ = ["standin"]

MARKUP = "*_~`|>#<[]()!:+-=\\@"
WIDE = "界"
EMOJI = "🧨"  # two UTF-16 units, as Discord counts


def request_of(questions: list[dict[str, Any]], *, long_ids: bool = True) -> AskRequest:
    caller = (
        Caller(agent_id="<" * 200, turn_id="*" * 200)
        if long_ids
        else Caller(agent_id="a", turn_id="t")
    )
    return AskRequest.model_validate(
        {
            "id": "R" * 64,
            "questions": questions,
            "caller": caller.model_dump(),
            "scope": {},
            "created_ms": 0,
        }
    )


def worst(n: int, multi: bool, text: str) -> list[dict[str, Any]]:
    """`n` questions at askq's limits, written in `text` (markup: each doubles escaped)."""
    return [
        {
            "id": f"q{k}",
            "header": text * 40,
            "question": text * 2000,
            "multiSelect": multi,
            "options": [
                {"label": f"{i}" + text * 119, "description": text * 500} for i in range(10)
            ],
        }
        for k in range(n)
    ]


@pytest.mark.parametrize("text", ["*", WIDE, EMOJI])
@pytest.mark.parametrize("shape", ["one", "one-multi", "four-and-free"])
def test_the_largest_requests_that_fit_stay_within_discords_limits(text: str, shape: str) -> None:
    """Content at most 2,000 (UTF-16) characters, at most 5 rows, custom ids of at most
    100 characters (a 64-character group and request id), labels cut to 80 and 100, the
    final message with the longest answers too; the stand-in's checks are Discord's."""
    if shape == "one":
        questions = worst(1, False, text)
    elif shape == "one-multi":
        questions = worst(1, True, text)
    else:
        questions = worst(4, True, text) + [
            {"id": "free", "header": text * 40, "question": text * 2000}
        ]
    request = request_of(questions)
    assert fits(request.questions)
    group = "g" * 64
    message = question_message(request, group)
    assert length(message["content"]) <= CONTENT_MAX
    assert message_problem(message) is None, message_problem(message)
    for row in message["components"]:
        for item in row["components"]:
            assert len(item["custom_id"]) <= MAX_CUSTOM_ID
            for option in item.get("options", []):
                assert len(option["label"]) <= 100 and len(option.get("description", "")) <= 100
    answers = [
        {
            "id": q["id"],
            "selected": [o["label"] for o in q.get("options", [])] if q.get("multiSelect") else [],
            "custom": text * 4000,
        }
        for q in questions
    ]
    final = final_message(
        request,
        Outcome(
            "ANSWERED",
            by="x" * 500,
            answers=tuple(Answer.model_validate(a) for a in answers),
        ),
    )
    assert length(final["content"]) <= CONTENT_MAX
    # Built to fit at a level, never cut at the end: the last line is still there.
    assert final["content"].split("\n")[-1].startswith("-# Agent")
    assert message["content"].split("\n")[-1].startswith("-# Agent")
    assert message_problem(final) is None
    dialog = modal(request, group)
    assert len(dialog["title"]) <= 45 and len(dialog["custom_id"]) <= MAX_CUSTOM_ID
    for row in dialog["components"]:
        assert len(row["components"][0]["label"]) <= 45


def test_requests_discord_cannot_carry_are_refused_by_fits() -> None:
    free = {"id": "f", "header": "H", "question": "Q"}
    assert not fits(request_of(worst(5, False, "a")).questions)  # five selects, a button row
    assert not fits(request_of([free] * 6).questions)  # a modal holds five inputs
    assert fits(request_of(worst(4, False, "a") + [free]).questions)


async def test_a_request_discord_cannot_carry_falls_through_to_the_next_tier(
    backend: Backend, seam: Seam, standin: DiscordStandIn
) -> None:
    """Eight questions: the Discord group declines, the next tier shows them; nothing
    is posted to Discord."""
    human = MemoryAnswerer()
    async with (
        backend.seam() as discord_seam,
        running(discord_seam, DiscordAnswerer(settings=discord_settings(standin)), "discord", 0),
        backend.seam() as desk_seam,
        running(desk_seam, human, "desk", 10),
    ):
        questions = [{"id": f"q{i}", "header": "H", "question": "Q?"} for i in range(8)]
        task = asyncio.create_task(
            seam.ask({"questions": questions}, Caller(agent_id="a", turn_id="t"))
        )
        offer = await human.next_presented(timeout=15)
        assert len(offer.questions) == 8
        await standin.settle()
        assert standin.calls == []
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


@pytest.mark.parametrize(
    "text",
    [
        MARKUP * 3,
        "@everyone @here @EVERYONE <@123456789012345678> <#1> <t:1:R> </x:1>",
        "# h\n## h2\n-# s\n> q\n>>> qq\n- a\n* b\n+ c\n1. one\n 23. two\n```py\nx\n```",
        "[a](https://e.example) https://e.example ||s|| ~~x~~ __u__ :skull: \\*",
        "plain words, digits 1.5 and unicode 界🧨",
    ],
)
def test_escaped_text_reads_as_written_and_holds_no_markup(text: str) -> None:
    shown = escape(text)
    # Every markup character is escaped (preceded by an odd run of backslashes).
    for match in re.finditer(r"[*_~`|>#<\[\]()!:+\-=]", shown):
        run = len(shown[: match.start()]) - len(shown[: match.start()].rstrip("\\"))
        assert run % 2 == 1, (shown, match.start())
    assert not re.search(r"@(everyone|here)", shown, re.IGNORECASE)
    assert not re.search(r"(?m)^\s*\d+\.", shown)
    read = re.sub(r"\\([^A-Za-z0-9\s])", r"\1", shown).replace("\u200b", "")
    assert read == text


def settings(**extra: Any) -> DiscordSettings:
    fields: dict[str, Any] = {
        "application_id": APP.id,
        "public_key": APP.public_key,
        "bot_token": "t",
        "routes": f'{{"*": "{CHANNEL}"}}',
        "allowlist": "*",
    }
    fields.update(extra)
    return DiscordSettings(**fields)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"application_id": ""}, "ASKQ_DISCORD_APPLICATION_ID is not set"),
        ({"application_id": "app"}, "ASKQ_DISCORD_APPLICATION_ID: 'app' is not an application id"),
        ({"public_key": ""}, "ASKQ_DISCORD_PUBLIC_KEY is not set"),
        ({"public_key": "ab" * 31}, "ASKQ_DISCORD_PUBLIC_KEY: not an Ed25519 public key"),
        ({"bot_token": None}, "ASKQ_DISCORD_BOT_TOKEN is not set"),
        ({"routes": ""}, "ASKQ_DISCORD_ROUTES is not set"),
        ({"routes": "{"}, "ASKQ_DISCORD_ROUTES: not valid JSON"),
        ({"routes": '{"*": "general"}'}, "ASKQ_DISCORD_ROUTES['*'].channel: 'general' is not"),
        ({"routes": '{"*": {"user": "@alice"}}'}, "ASKQ_DISCORD_ROUTES['*'].user: '@alice'"),
        ({"routes": f'{{"*": {{"channel": "{CHANNEL}", "x": 1}}}}'}, "unknown field(s) x"),
        ({"allowlist": ""}, "ASKQ_DISCORD_ROUTES['*']: nobody may answer"),
        ({"allowlist": "alice"}, "ASKQ_DISCORD_ALLOWLIST: 'alice' is not a Discord user id"),
        ({"api_url": "discord.com"}, "ASKQ_DISCORD_API_URL: 'discord.com' is not an http(s) URL"),
    ],
)
def test_settings_errors_name_the_variable(extra: dict[str, Any], says: str) -> None:
    with pytest.raises(AskError) as raised:
        DiscordConfig.from_settings(settings(**extra))
    assert raised.value.code is ErrorCode.CONFIG_ERROR
    assert says in raised.value.message, raised.value.message


def test_routes_allow_users_and_roles_and_a_dm_its_user() -> None:
    user, role, other = "1" * 18, "2" * 18, "3" * 18
    routes = parse_routes(
        f'{{"env=prod": {{"user": "{other}"}}, "*": {{"channel": "{CHANNEL}",'
        f' "allow": ["{user}", "role:{role}"]}}}}',
        "",
    )
    channel = routes.match({})
    assert channel is not None and channel.kind == "channel"
    assert channel.allows(user) and channel.allows("9" * 18, [role])
    assert not channel.allows("9" * 18, ["8" * 18]) and not channel.allows(None)
    dm = routes.match({"env": "prod"})
    assert dm is not None and dm.kind == "user" and dm.allows(other) and not dm.allows(user)


def test_the_signature_check() -> None:
    now = 1_700_000_000
    verifier = Verifier(bytes.fromhex(APP.public_key), 300, clock=lambda: now)
    body = b'{"type":1}'
    verifier.check(APP.sign(str(now), body), str(now), body)
    for signature, stamp, why in [
        (None, str(now), "no signature headers"),
        (APP.sign(str(now), body), None, "no signature headers"),
        ("xy" * 64, str(now), "not hex"),
        ("ab" * 63, str(now), "not an Ed25519 signature"),
        (APP.sign(str(now), body + b" "), str(now), "bad signature"),
        (APP.sign(str(now - 301), body), str(now - 301), "off this clock"),
        (APP.sign("-5", body), "-5", "not Unix seconds"),
    ]:
        with pytest.raises(Unsigned, match=why):
            verifier.check(signature, stamp, body)


def response(status: int, headers: dict[str, str], body: Any = None) -> httpx.Response:
    return httpx.Response(status, headers=headers, json=body if body is not None else {})


def test_rate_limits_are_remembered_by_bucket_and_globally() -> None:
    limits = RateLimits()
    post_a, post_b = "POST /channels/1/messages", "POST /channels/2/messages"
    assert limits.record(post_a, response(200, {"X-RateLimit-Bucket": "b1"})) is None
    assert limits.wait(post_a) == 0
    limits.record(
        post_a,
        response(
            200,
            {
                "X-RateLimit-Bucket": "b1",
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset-After": "2.5",
            },
        ),
    )
    assert 2.0 < limits.wait(post_a) <= 2.5 and limits.wait(post_b) == 0
    wait = limits.record(
        post_b, response(429, {"Retry-After": "3"}, {"retry_after": 1.25, "global": False})
    )
    assert wait == 1.25 and 1.0 < limits.wait(post_b) <= 1.25
    wait = limits.record(post_b, response(429, {"X-RateLimit-Global": "true", "Retry-After": "4"}))
    assert wait == 4.0
    assert limits.wait("PATCH /channels/9/messages/:id") > 3.5  # every route waits
    started = time.monotonic()
    assert limits.wait(post_a) <= 4.0 + (time.monotonic() - started)


def test_route_keys_keep_the_channel_and_drop_message_ids_and_tokens() -> None:
    channel, message = "910000000000000001", "1200000000000000001"
    assert route_key("PATCH", f"/channels/{channel}/messages/{message}") == (
        f"PATCH /channels/{channel}/messages/:id"
    )
    assert route_key("POST", "/webhooks/800000000000000001/aW50ZXJhY3Rpb24.tok") == (
        "POST /webhooks/:id/:token"
    )
    assert route_key("POST", "/users/@me/channels") == "POST /users/@me/channels"
