"""A stand-in for Slack on 127.0.0.1, and what Slack sends to an app.

`SlackStandIn` serves the Web API methods the Slack answerer calls (recording each
call and answering like Slack: `{"ok": true, "channel": ..., "ts": ...}`, a 429 with
Retry-After or an error on demand, `invalid_blocks` for blocks over Slack's limits),
and a Socket Mode WebSocket (`apps.connections.open` hands out its ws:// URL) that
pushes envelopes and records acknowledgements.

`sign`, `block_actions`, `view_submission` build the signed interaction posts Slack
makes to an app's HTTP endpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import aiohttp
import pytest
from aiohttp import web

from askq.answerers.slack import SlackSettings

BOT_TOKEN = "xoxb-standin"
APP_TOKEN = "xapp-standin"
SIGNING_SECRET = "standin-signing-secret"

# Slack's Block Kit limits the stand-in enforces (what Slack answers invalid_blocks to).
LIMITS = {
    "header": 150,
    "section": 3000,
    "context": 3000,
    "button": 75,
    "option_text": 75,
    "option_description": 75,
    "block_id": 255,
    "action_id": 255,
    "value": 2000,
    "url": 3000,
    "option_value": 150,
    "blocks": 50,
    "modal_blocks": 100,
}


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str | None
    response: dict[str, Any] = field(default_factory=dict)


@dataclass
class Failure:
    status: int
    error: str
    retry_after: int | None = None


def block_problems(blocks: list[dict[str, Any]], most: str = "blocks") -> list[str]:
    """What Slack would refuse in a message's blocks (a modal's: `most="modal_blocks"`)."""
    problems: list[str] = []

    def over(what: str, text: str, limit: str) -> None:
        if len(text) > LIMITS[limit]:
            problems.append(f"{what}: {len(text)} > {LIMITS[limit]}")
        if limit in ("header", "section", "context") and not text:
            problems.append(f"{what}: empty")  # Slack wants at least one character

    if len(blocks) > LIMITS[most]:
        problems.append(f"{len(blocks)} blocks > {LIMITS[most]}")
    block_ids = [b["block_id"] for b in blocks if "block_id" in b]
    if len(block_ids) != len(set(block_ids)):
        problems.append("duplicate block_id")
    for n, block in enumerate(blocks):
        kind = block["type"]
        over(f"blocks[{n}].block_id", block.get("block_id", ""), "block_id")
        if kind == "header":
            over(f"blocks[{n}].text", block["text"]["text"], "header")
        elif kind == "section":
            over(f"blocks[{n}].text", block["text"]["text"], "section")
        elif kind == "context":
            for element in block["elements"]:
                over(f"blocks[{n}].elements", element["text"], "context")
        elif kind == "actions":
            action_ids = [e["action_id"] for e in block["elements"]]
            if len(action_ids) != len(set(action_ids)):
                problems.append(f"blocks[{n}]: duplicate action_id")
            for element in block["elements"]:
                where = f"blocks[{n}].{element['action_id']}"
                over(where, element["action_id"], "action_id")
                if element["type"] == "button":
                    over(f"{where}.text", element["text"]["text"], "button")
                    over(f"{where}.value", element.get("value", ""), "value")
                    if "url" in element:  # a link button
                        over(f"{where}.url", element["url"], "url")
                        if not element["url"].startswith(("https://", "http://")):
                            problems.append(f"{where}.url: not an http(s) URL")
                for option in element.get("options", []):
                    over(f"{where}.option.text", option["text"]["text"], "option_text")
                    over(f"{where}.option.value", option["value"], "option_value")
                    if "description" in option:
                        over(
                            f"{where}.option.description",
                            option["description"]["text"],
                            "option_description",
                        )
                if len(element.get("options", [])) > 10:
                    problems.append(f"{where}: more than 10 options")
    return problems


class SlackStandIn:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.acks: list[str] = []
        self._failures: dict[str, list[Failure]] = {}
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._n = 0
        self.port = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- what tests set up and look at ---------------------------------------------------

    def fail_next(
        self, method: str, *, status: int = 429, error: str = "ratelimited", retry_after: int = 1
    ) -> None:
        """The next call of `method` fails (default: a 429 with Retry-After)."""
        self._failures.setdefault(method, []).append(
            Failure(status, error, retry_after if status == 429 else None)
        )

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        return [c.args for c in self.calls if c.method == method]

    async def message(self, n: int = 1, timeout: float = 10) -> Message:
        """The n-th message posted (once it is), with the channel and ts Slack gave it."""
        await self.wait_for("chat.postMessage", n, timeout)
        call = [c for c in self.calls if c.method == "chat.postMessage"][n - 1]
        assert call.response.get("ok"), call.response
        return Message(call.response["channel"], call.response["ts"], call.args["blocks"])

    async def wait_for(
        self, method: str, count: int = 1, timeout: float = 10
    ) -> list[dict[str, Any]]:
        """Wait until `method` was called `count` times (successfully or not)."""

        async def enough() -> list[dict[str, Any]]:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.calls_to(method)) >= count)
            return self.calls_to(method)

        return await asyncio.wait_for(enough(), timeout)

    async def settle(self, seconds: float = 0.3) -> None:
        """Give in-flight work time to (not) happen, for 'nothing changed' checks."""
        await asyncio.sleep(seconds)

    # --- Socket Mode ---------------------------------------------------------------------

    async def wait_connected(self, timeout: float = 10) -> None:
        async def connected() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self._sockets))

        await asyncio.wait_for(connected(), timeout)

    async def push(self, payload: Any, kind: str = "interactive", timeout: float = 5) -> str:
        """Send an envelope to the connected app; return once it is acknowledged."""
        envelope_id = uuid.uuid4().hex
        body = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": False,
        }
        await self._sockets[-1].send_str(json.dumps(body))

        async def acked() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: envelope_id in self.acks)

        await asyncio.wait_for(acked(), timeout)
        return envelope_id

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1}))
        async with self._changed:
            self._sockets.append(ws)
            self._changed.notify_all()
        try:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    envelope_id = json.loads(message.data).get("envelope_id")
                    async with self._changed:
                        self.acks.append(envelope_id)
                        self._changed.notify_all()
        finally:
            self._sockets.remove(ws)
        return ws

    # --- the Web API ---------------------------------------------------------------------

    async def _args(self, request: web.Request) -> tuple[dict[str, Any], str | None]:
        token = None
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth.removeprefix("Bearer ")
        if request.content_type == "application/json":
            args: dict[str, Any] = await request.json()
        else:
            args = dict(parse_qsl(await request.text()))
            for name in ("blocks", "view"):
                if isinstance(args.get(name), str):
                    args[name] = json.loads(args[name])
        args.update(dict(request.query))
        token = args.pop("token", None) or token
        return args, token

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args, token = await self._args(request)
        call = Call(method, args, token)
        status, headers = 200, {}
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        view_blocks = (args.get("view") or {}).get("blocks")
        blocks = args.get("blocks") or view_blocks
        most = "modal_blocks" if view_blocks and not args.get("blocks") else "blocks"
        if token != expected:
            call.response = {"ok": False, "error": "invalid_auth"}
        elif self._failures.get(method):
            failure = self._failures[method].pop(0)
            status = failure.status
            if failure.retry_after:
                headers["Retry-After"] = str(failure.retry_after)
            call.response = {"ok": False, "error": failure.error}
        elif blocks and (problems := block_problems(blocks, most)):
            call.response = {"ok": False, "error": "invalid_blocks", "errors": problems}
        else:
            call.response = self._answer(method, args)
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        return web.json_response(call.response, status=status, headers=headers)

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        self._n += 1
        ts = f"{1700000000 + self._n}.{self._n:06d}"
        if method == "auth.test":
            return {"ok": True, "user_id": "UBOT", "team_id": "T1", "bot_id": "B1"}
        if method == "apps.connections.open":
            return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket"}
        if method == "chat.postMessage":
            channel = str(args["channel"])
            if channel[:1] in "UW":  # a DM with the app: Slack answers with the IM id
                channel = "D" + channel[1:]
            elif channel.startswith("#"):
                channel = "C" + hashlib.sha1(channel.encode()).hexdigest()[:8].upper()
            return {"ok": True, "channel": channel, "ts": ts, "message": {"ts": ts}}
        if method == "chat.update":
            return {"ok": True, "channel": args["channel"], "ts": args["ts"]}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": ts}
        if method in ("views.open", "views.update"):
            return {"ok": True, "view": {"id": f"V{self._n}", **(args.get("view") or {})}}
        return {"ok": False, "error": "unknown_method"}


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    s = SlackStandIn()
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


# --- what Slack sends to the app -----------------------------------------------------------


def sign(body: str, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """Slack's v0 request signature headers for `body`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def form(payload: Any) -> str:
    return urlencode({"payload": json.dumps(payload)})


async def post_interaction(
    port: int, payload: Any, *, headers: dict[str, str] | None = None, body: str | None = None
) -> tuple[int, str]:
    """POST an interaction to the app's endpoint, signed unless `headers` are given."""
    body = form(payload) if body is None else body
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers or sign(body)
        ) as response:
            return response.status, await response.text()


@dataclass
class Message:
    """A question message as the stand-in received it."""

    channel: str
    ts: str
    blocks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def request_id(self) -> str:
        block_id = next(b["block_id"] for b in self.blocks if b["type"] == "actions")
        return str(block_id.split(":")[2])  # askq:<part>:<request id>:<group>

    @property
    def group(self) -> str:
        block_id = next(b["block_id"] for b in self.blocks if b["type"] == "actions")
        return str(block_id.split(":")[3])

    def element(self, action_id: str, question: int | None = None) -> tuple[str, dict[str, Any]]:
        """(block_id, element) of the first element with that action id (in question's block)."""
        for block in self.blocks:
            if block["type"] != "actions":
                continue
            if question is not None and not block["block_id"].startswith(f"askq:{question}:"):
                continue
            for element in block["elements"]:
                if element["action_id"] == action_id:
                    return block["block_id"], element
        raise KeyError(action_id)


def user(user_id: str, name: str = "") -> dict[str, str]:
    return {"id": user_id, "username": name or user_id.lower(), "team_id": "T1"}


def block_actions(
    message: Message,
    who: dict[str, str],
    action_id: str,
    *,
    question: int | None = None,
    selected: list[int] | None = None,
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A click on (or a selection change of) one element of the message."""
    block_id, element = message.element(action_id, question)
    action: dict[str, Any] = {
        "type": element["type"],
        "block_id": block_id,
        "action_id": action_id,
        "action_ts": f"{time.time():.6f}",
    }
    if element["type"] == "button":
        if "value" in element:  # a link button has none
            action["value"] = element["value"]
        action["text"] = element["text"]
    elif element["type"] == "checkboxes":
        action["selected_options"] = [element["options"][i] for i in selected or []]
    elif element["type"] == "radio_buttons":
        chosen = selected or []
        action["selected_option"] = element["options"][chosen[0]] if chosen else None
    return {
        "type": "block_actions",
        "user": who,
        "api_app_id": "A1",
        "team": {"id": "T1"},
        "trigger_id": f"trigger-{uuid.uuid4().hex[:8]}",
        "container": {"type": "message", "channel_id": message.channel, "message_ts": message.ts},
        "channel": {"id": message.channel},
        "message": {"ts": message.ts, "blocks": message.blocks},
        "state": {"values": state or {}},
        "actions": [action],
    }


def view_submission(view: dict[str, Any], who: dict[str, str], text: str | None) -> dict[str, Any]:
    """The "Other…" modal (as views.open got it) submitted with `text`."""
    return {
        "type": "view_submission",
        "user": who,
        "team": {"id": "T1"},
        "view": {
            "id": "V1",
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {
                "values": {"askq:custom": {"custom": {"type": "plain_text_input", "value": text}}}
            },
        },
    }


# --- the Slack answerer against the stand-in ------------------------------------------------

ROUTES = {
    "tenant=acme": {"channel": "C0ACME", "allow": ["UALICE", "UBOB"]},
    "tenant=dm": "UCAROL",
    "*": "C0GENERAL",
}
ALICE = user("UALICE", "alice")
BOB = user("UBOB", "bob")
MALLORY = user("UMALLORY", "mallory")


def slack_settings(standin: SlackStandIn, **extra: Any) -> SlackSettings:
    """Settings of a Slack worker talking to the stand-in over the HTTP endpoint
    (`extra`: by field name, or by `slack_` + field name as the variables have it)."""
    fields: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "signing_secret": SIGNING_SECRET,
        "routes": json.dumps(ROUTES),
        "allowlist": "UALICE",
        "api_url": standin.api_url,
        "socket_mode": False,
        "http_host": "127.0.0.1",
        "http_port": 0,
    }
    fields.update({name.removeprefix("slack_"): value for name, value in extra.items()})
    return SlackSettings(**fields)
