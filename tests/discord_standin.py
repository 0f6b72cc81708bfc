"""A stand-in for Discord on 127.0.0.1, and what Discord POSTs to a bot's interactions
endpoint. Built from Discord's developer docs ("Receiving and Responding" to
interactions, "Component Reference", "Rate Limits", the Channel and User resources).

`DiscordStandIn` serves the REST API (`/api/v10`):

- `POST /channels/{id}/messages` (a message, or a reply with `message_reference`),
  `PATCH /channels/{id}/messages/{id}`, `POST /users/@me/channels` (a DM channel),
  `POST /webhooks/{application}/{token}` (an interaction's follow-up); each checked for
  a bot token it knows (`Authorization: Bot ...`) and recorded;
- Discord's checks of a message: content at most 2,000 characters, at most 5 action
  rows of at most 5 buttons or one select of at most 25 options, custom ids of 1-100
  characters unique in the message, labels of at most 80, `allowed_mentions` given
  (askq's rule: every message says who it may ping), refused with Discord's 50035
  "Invalid Form Body";
- rate-limit headers on every answer (`X-RateLimit-Bucket`, `-Remaining`,
  `-Reset-After`), a 429 on demand (a route's, or the global limit, with `retry_after`
  in the body as Discord sends it), a request held until released (a replica dying
  mid-send).

`Application` holds an Ed25519 key made for the test and signs interactions with it as
Discord does (`X-Signature-Ed25519` over `X-Signature-Timestamp` + body);
`DiscordStandIn.send` POSTs them to a worker's endpoint.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from askq.answerers.discord import DiscordSettings

GUILD = "900000000000000001"
CHANNEL = "910000000000000001"
OTHER_CHANNEL = "910000000000000002"
OPS_ROLE = "920000000000000001"


@dataclass(frozen=True)
class User:
    id: str
    name: str
    roles: tuple[str, ...] = ()

    def account(self) -> dict[str, Any]:
        return {"id": self.id, "username": self.name.lower(), "global_name": self.name}


ALICE = User("100000000000000001", "Alice")
BOB = User("100000000000000002", "Bob", roles=(OPS_ROLE,))  # answers through his role
CAROL = User("100000000000000003", "Carol")  # a DM route's user
MALLORY = User("100000000000000004", "Mallory", roles=("920000000000000999",))


class Application:
    """A Discord application: its id, its bot's token, its Ed25519 key pair."""

    def __init__(self, app_id: str, token: str) -> None:
        self.id = app_id
        self.token = token
        self.private = Ed25519PrivateKey.generate()

    @property
    def public_key(self) -> str:
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return raw.hex()

    def sign(self, timestamp: str, body: bytes) -> str:
        return self.private.sign(timestamp.encode() + body).hex()


APP = Application("800000000000000001", "standin-bot-token-1")
APP_2 = Application("800000000000000002", "standin-bot-token-2")  # a second group's


@dataclass
class Call:
    op: str  # post | reply | edit | dm | follow_up
    channel: str
    body: dict[str, Any]
    token: str | None
    message_id: str | None = None  # edit: the message's; post/reply: the new one's
    status: int = 200
    at: float = field(default_factory=time.monotonic)


@dataclass
class Hold:
    reached: asyncio.Event
    release: asyncio.Event


@dataclass
class Failure:
    status: int
    retry_after: float | None
    is_global: bool


class DiscordStandIn:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.apps = {a.token: a for a in (APP, APP_2)}
        self._failures: dict[str, list[Failure]] = {}
        self._held: dict[str, Hold] = {}
        self._exhaust: dict[str, float] = {}  # op -> Reset-After of a bucket used up
        self._changed = asyncio.Condition()
        self._n = 0
        self._runner: web.AppRunner | None = None
        self.on_post: Callable[[Call], None] | None = None  # a question posted (the bench)
        self.on_edit: Callable[[Call], None] | None = None  # a message edited (the bench)
        self.port = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v10/channels/{channel}/messages", self._post)
        app.router.add_patch("/api/v10/channels/{channel}/messages/{message}", self._edit)
        app.router.add_post("/api/v10/users/@me/channels", self._dm)
        app.router.add_post("/api/v10/webhooks/{app}/{token}", self._follow_up)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def stop(self) -> None:
        for held in self._held.values():
            held.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- what tests set up and look at ---------------------------------------------------

    def fail_next(
        self, op: str, *, status: int = 429, retry_after: float = 0.5, is_global: bool = False
    ) -> None:
        """The next call of `op` fails (default: a route's 429 with retry_after)."""
        self._failures.setdefault(op, []).append(
            Failure(status, retry_after if status == 429 else None, is_global)
        )

    def exhaust_next(self, op: str, reset_after: float) -> None:
        """The next successful `op` says its bucket is used up for `reset_after` s."""
        self._exhaust[op] = reset_after

    def hold_next(self, op: str) -> Hold:
        """The next call of `op` waits, unanswered and with nothing done, until it is
        released; a call whose client went away meanwhile then does nothing (499)."""
        hold = Hold(asyncio.Event(), asyncio.Event())
        self._held[op] = hold
        return hold

    def calls_to(self, op: str) -> list[Call]:
        return [c for c in self.calls if c.op == op and c.status < 300]

    async def wait_for(self, op: str, count: int = 1, timeout: float = 15) -> list[Call]:
        async def enough() -> list[Call]:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.calls_to(op)) >= count)
            return self.calls_to(op)

        return await asyncio.wait_for(enough(), timeout)

    async def message(self, n: int = 1, timeout: float = 15) -> Posted:
        """The n-th question posted (once it is)."""
        call = (await self.wait_for("post", n, timeout))[n - 1]
        assert call.message_id is not None
        return Posted(call.channel, call.message_id, call.body)

    async def settle(self, seconds: float = 0.3) -> None:
        await asyncio.sleep(seconds)

    def edits_of(self, posted: Posted) -> list[dict[str, Any]]:
        return [
            c.body
            for c in self.calls_to("edit")
            if (c.channel, c.message_id) == (posted.channel, posted.message_id)
        ]

    # --- what Discord POSTs to the bot -----------------------------------------------------

    async def send(
        self,
        port: int,
        interaction: dict[str, Any],
        *,
        app: Application = APP,
        timestamp: str | None = None,
        signature: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """POST an interaction to a bot's endpoint, signed as Discord signs it; its
        status and body (JSON when there is one)."""
        body = json.dumps(interaction).encode()
        stamp = timestamp if timestamp is not None else str(int(time.time()))
        if headers is None:
            headers = {
                "X-Signature-Ed25519": signature or app.sign(stamp, body),
                "X-Signature-Timestamp": stamp,
            }
        headers = {**headers, "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"http://127.0.0.1:{port}/interactions", data=body, headers=headers
            ) as response:
                text = await response.text()
                try:
                    return response.status, json.loads(text) if text else None
                except ValueError:
                    return response.status, text

    # --- the REST API ---------------------------------------------------------------------

    async def _record(self, call: Call) -> None:
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _limits(self, op: str, channel: str) -> dict[str, str]:
        reset = self._exhaust.pop(op, None)
        return {
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0" if reset is not None else "4",
            "X-RateLimit-Reset-After": str(reset if reset is not None else 5.0),
            "X-RateLimit-Bucket": f"bucket-{op}-{channel}",
        }

    async def _begin(
        self, op: str, request: web.Request, channel: str
    ) -> tuple[Call, web.Response | None]:
        """Check the bot's token and the message, apply a failure or a hold."""
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bot ") if auth.startswith("Bot ") else None
        body = await request.json() if request.body_exists else {}
        if op == "post" and "message_reference" in body:
            op = "reply"
        call = Call(op, channel, body, token)
        if op != "follow_up" and token not in self.apps:
            call.status = 401
            await self._record(call)
            return call, web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        held = self._held.pop(op, None)
        if held is not None:
            held.reached.set()
            await held.release.wait()
            if request.transport is None or request.transport.is_closing():
                call.status = 499  # the client went away (died) while held: nothing done
                await self._record(call)
                return call, web.Response(status=499)
        failures = self._failures.get(op)
        if failures:
            failure = failures.pop(0)
            call.status = failure.status
            await self._record(call)
            if failure.status != 429:
                return call, web.json_response(
                    {"message": "stand-in failure", "code": 0}, status=failure.status
                )
            headers = {
                "Retry-After": str(failure.retry_after),
                "X-RateLimit-Scope": "global" if failure.is_global else "user",
            }
            if failure.is_global:
                headers["X-RateLimit-Global"] = "true"
            else:
                headers.update(
                    {
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset-After": str(failure.retry_after),
                        "X-RateLimit-Bucket": f"bucket-{op}-{channel}",
                    }
                )
            return call, web.json_response(
                {
                    "message": "You are being rate limited.",
                    "retry_after": failure.retry_after,
                    "global": failure.is_global,
                },
                status=429,
                headers=headers,
            )
        if op in ("post", "reply", "edit", "follow_up"):
            problem = message_problem(body)
            if problem is not None:
                call.status = 400
                await self._record(call)
                return call, web.json_response(
                    {"code": 50035, "message": "Invalid Form Body", "errors": problem},
                    status=400,
                )
        return call, None

    def _new_id(self) -> str:
        self._n += 1
        return str(1_200_000_000_000_000_000 + self._n)

    async def _post(self, request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        call, refused = await self._begin("post", request, channel)
        if refused is not None:
            return refused
        call.message_id = self._new_id()
        await self._record(call)
        if self.on_post is not None and call.op == "post":
            self.on_post(call)
        return web.json_response(
            {"id": call.message_id, "channel_id": channel, **call.body},
            headers=self._limits(call.op, channel),
        )

    async def _edit(self, request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        call, refused = await self._begin("edit", request, channel)
        if refused is not None:
            return refused
        call.message_id = request.match_info["message"]
        await self._record(call)
        if self.on_edit is not None:
            self.on_edit(call)
        return web.json_response(
            {"id": call.message_id, "channel_id": channel, **call.body},
            headers=self._limits("edit", channel),
        )

    async def _dm(self, request: web.Request) -> web.Response:
        call, refused = await self._begin("dm", request, "")
        if refused is not None:
            return refused
        recipient = str(call.body.get("recipient_id", ""))
        call.channel = "93" + recipient[2:]  # one DM channel per user, as Discord keeps it
        await self._record(call)
        return web.json_response({"id": call.channel, "type": 1})

    async def _follow_up(self, request: web.Request) -> web.Response:
        call, refused = await self._begin("follow_up", request, request.match_info["token"])
        if refused is not None:
            return refused
        call.message_id = self._new_id()
        await self._record(call)
        return web.json_response({"id": call.message_id, **call.body})


def message_problem(body: dict[str, Any]) -> str | None:
    """Why Discord would refuse this message (None: it takes it)."""
    if body.get("allowed_mentions") is None:
        return "askq's rule: every message names allowed_mentions"
    if len(body.get("content") or "") > 2000:
        return "content: Must be 2000 or fewer in length."
    rows = body.get("components") or []
    if len(rows) > 5:
        return "components: Must be 5 or fewer in length."
    seen: set[str] = set()
    for row in rows:
        items = row.get("components") or []
        if row.get("type") != 1 or not 1 <= len(items) <= 5:
            return "components: an action row holds 1 to 5 components"
        if len(items) > 1 and any(i.get("type") != 2 for i in items):
            return "components: a select fills its row alone"
        for item in items:
            cid = item.get("custom_id", "")
            if not 1 <= len(cid) <= 100 or cid in seen:
                return f"custom_id: 1-100 characters, unique ({cid!r})"
            seen.add(cid)
            if len(item.get("label", "")) > 80:
                return "label: Must be 80 or fewer in length."
            if item.get("type") == 3 and not 1 <= len(item.get("options", [])) <= 25:
                return "options: 1 to 25"
    return None


@dataclass
class Posted:
    """A question as the stand-in received it."""

    channel: str
    message_id: str
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def content(self) -> str:
        return str(self.body["content"])

    def components(self) -> list[dict[str, Any]]:
        return [c for row in self.body.get("components", []) for c in row["components"]]

    def button(self, label_start: str) -> dict[str, Any]:
        return next(
            c for c in self.components() if c["type"] == 2 and c["label"].startswith(label_start)
        )

    def selects(self) -> list[dict[str, Any]]:
        return [c for c in self.components() if c["type"] == 3]

    @property
    def request_id(self) -> str:
        return str(self.components()[0]["custom_id"].split("|")[3])


# --- what Discord sends to the bot ---------------------------------------------------------


def interaction(
    kind: int,
    who: User,
    data: dict[str, Any],
    *,
    posted: Posted | None = None,
    app: Application = APP,
    dm: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": str(1_300_000_000_000_000_000 + uuid.uuid4().int % 10**15),
        "application_id": app.id,
        "type": kind,
        "token": f"interaction-token-{uuid.uuid4().hex[:16]}",
        "version": 1,
        "channel_id": posted.channel if posted else CHANNEL,
        "data": data,
    }
    if dm:
        body["user"] = who.account()
    else:
        body["guild_id"] = GUILD
        body["member"] = {"user": who.account(), "roles": list(who.roles)}
    if posted is not None:
        body["message"] = {"id": posted.message_id, "channel_id": posted.channel}
    return body


def click(
    posted: Posted,
    who: User,
    component: dict[str, Any],
    *,
    app: Application = APP,
    dm: bool = False,
) -> dict[str, Any]:
    """A button's MESSAGE_COMPONENT interaction."""
    data = {"custom_id": component["custom_id"], "component_type": 2}
    return interaction(3, who, data, posted=posted, app=app, dm=dm)


def choose(
    posted: Posted, who: User, select: dict[str, Any], values: list[str], *, dm: bool = False
) -> dict[str, Any]:
    """A string select's MESSAGE_COMPONENT interaction (values: the options' values)."""
    data = {"custom_id": select["custom_id"], "component_type": 3, "values": values}
    return interaction(3, who, data, posted=posted, dm=dm)


def submit_modal(
    posted: Posted, who: User, modal: dict[str, Any], texts: dict[str, str], *, dm: bool = False
) -> dict[str, Any]:
    """The MODAL_SUBMIT of a modal the bot opened, its inputs filled with `texts`."""
    rows = [
        {
            "type": 1,
            "components": [
                {"type": 4, "custom_id": i["custom_id"], "value": texts.get(i["custom_id"], "")}
                for i in row["components"]
            ],
        }
        for row in modal["components"]
    ]
    data = {"custom_id": modal["custom_id"], "components": rows}
    return interaction(5, who, data, posted=posted, dm=dm)


ROUTES = {
    "tenant=acme": {"channel": CHANNEL, "allow": [ALICE.id, f"role:{OPS_ROLE}"]},
    "tenant=dm": {"user": CAROL.id},
    "*": CHANNEL,
}


def discord_settings(
    standin: DiscordStandIn, app: Application = APP, **extra: Any
) -> DiscordSettings:
    """Settings of a Discord worker talking to the stand-in (`extra`: by field name)."""
    fields: dict[str, Any] = {
        "application_id": app.id,
        "public_key": app.public_key,
        "bot_token": app.token,
        "routes": json.dumps(ROUTES),
        "allowlist": ALICE.id,
        "api_url": standin.api_url,
        "http_host": "127.0.0.1",
        "http_port": 0,
    }
    fields.update(extra)
    return DiscordSettings(**fields)


@pytest.fixture
async def standin() -> AsyncIterator[DiscordStandIn]:
    s = DiscordStandIn()
    await s.start()
    try:
        yield s
    finally:
        await s.stop()
