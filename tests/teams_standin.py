"""A stand-in for Microsoft's side of a Teams bot on 127.0.0.1, and what Teams sends to
a bot. Built from the Bot Framework REST docs ("Authentication", "Conversations"), the
Teams docs (proactive messages, Universal Actions) and the Teams SDK's own models.

`TeamsStandIn` serves:

- the token authority (over TLS, as MSAL insists on https): the tenant's OpenID
  configuration and `POST /<tenant>/oauth2/v2.0/token`, the client-credentials grant,
  refusing a wrong secret with `invalid_client` as Entra does;
- the Bot Framework's OpenID metadata and signing keys (`/v1/.well-known/...`): keys it
  generates, endorsed for `msteams`;
- the Bot Connector API under a service URL (`/amer/v3/conversations...`): creating,
  updating and replying to activities, creating a personal chat, reading a member,
  each checked for the bot's bearer token and recorded; a 429 or an error on demand,
  a request held until released (a replica dying mid-send), a card over Teams' 28 KB
  refused with 413.

`activity` builders and `TeamsStandIn.send` make the signed POSTs the Bot Connector
service makes to a bot's messaging endpoint.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from askq.answerers.teams import TeamsSettings

APP_ID = "0a1b2c3d-0000-4000-8000-00000000a99e"
APP_PASSWORD = "standin-client-secret"
APP_ID_2 = "0a1b2c3d-0000-4000-8000-00000000b222"  # a second bot, for a second group
APP_PASSWORD_2 = "standin-client-secret-2"
APPS = {APP_ID: APP_PASSWORD, APP_ID_2: APP_PASSWORD_2}
TENANT = "11111111-2222-4333-8444-555555555555"
OTHER_TENANT = "99999999-2222-4333-8444-555555555555"
ISSUER = "https://api.botframework.com"
REGION = "amer"
CHANNEL = "19:ops0123456789@thread.tacv2"
OTHER_CHANNEL = "19:mgr0123456789@thread.tacv2"
TEAMS_MAX_BYTES = 28 * 1024  # what Teams takes in one message


@dataclass(frozen=True)
class User:
    id: str  # 29:...
    name: str
    object_id: str
    upn: str

    def account(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "aadObjectId": self.object_id}


ALICE = User("29:alice", "Alice Adams", "aaaaaaaa-0000-4000-8000-000000000001", "alice@contoso.com")
BOB = User("29:bob", "Bob Brown", "bbbbbbbb-0000-4000-8000-000000000002", "bob@contoso.com")
CAROL = User("29:carol", "Carol Cruz", "cccccccc-0000-4000-8000-000000000003", "carol@contoso.com")
MALLORY = User("29:mallory", "Mallory", "dddddddd-0000-4000-8000-000000000004", "mal@contoso.com")
PEOPLE = {u.id: u for u in (ALICE, BOB, CAROL, MALLORY)}


@dataclass
class Call:
    op: str  # token | create | update | reply | create_conversation | member
    conversation: str
    body: dict[str, Any]
    token: str | None
    activity_id: str | None = None  # update: the card's; create/reply: the new one's
    status: int = 200


@dataclass
class Hold:
    reached: asyncio.Event  # the held call arrived
    release: asyncio.Event  # set: let it go on


@dataclass
class Failure:
    status: int
    retry_after: int | None
    code: str


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _self_signed(key: rsa.RSAPrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


class SigningKey:
    """A key the stand-in signs activities with, and how the keys document lists it."""

    def __init__(self, kid: str, endorsements: list[str]) -> None:
        self.kid = kid
        self.private = _rsa()
        self.endorsements = endorsements

    def jwk(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key())
        )
        return {**data, "kid": self.kid, "use": "sig", "endorsements": self.endorsements}


class TeamsStandIn:
    def __init__(self, tmp: Path) -> None:
        self.calls: list[Call] = []
        self.key = SigningKey("standin-key-1", ["msteams", "emulator"])
        self.unendorsed = SigningKey("standin-key-2", ["skype"])  # listed, not for msteams
        self.stranger = SigningKey("standin-key-1", ["msteams"])  # same kid, not published
        self.tokens_issued: list[str] = []
        self.token_apps: dict[str, str] = {}  # token -> the app it was issued to
        self.installed_for: set[str] = set()  # object ids the app is installed for
        self.metadata_reads = 0
        self._failures: dict[str, list[Failure]] = {}
        self._held: dict[str, Hold] = {}
        self._changed = asyncio.Condition()
        self._n = 0
        self._tls_key = _rsa()
        self._cert = _self_signed(self._tls_key)
        self.ca_file = tmp / "standin-ca.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        self._runners: list[web.AppRunner] = []
        self.on_create: Callable[[Call], None] | None = None  # a card posted (the bench)
        self.port = 0  # Bot Connector + Bot Framework metadata (http)
        self.login_port = 0  # the token authority (https)

    @property
    def service_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{REGION}/"

    @property
    def login_url(self) -> str:
        return f"https://127.0.0.1:{self.login_port}"

    @property
    def openid_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/.well-known/openidconfiguration"

    async def start(self) -> None:
        api = web.Application()
        api.router.add_get("/v1/.well-known/openidconfiguration", self._openid)
        api.router.add_get("/v1/.well-known/keys", self._keys)
        api.router.add_post(f"/{REGION}/v3/conversations", self._create_conversation)
        base = f"/{REGION}/v3/conversations/{{conversation}}"
        api.router.add_post(f"{base}/activities", self._create)
        api.router.add_put(f"{base}/activities/{{activity}}", self._update)
        api.router.add_post(f"{base}/activities/{{activity}}", self._reply)
        api.router.add_get(f"{base}/members/{{member}}", self._member)
        self.port = await self._serve(api, None)
        login = web.Application()
        login.router.add_get("/{tenant}/v2.0/.well-known/openid-configuration", self._tenant_config)
        login.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert_file = self.ca_file.with_name("standin-cert.pem")
        key_file = self.ca_file.with_name("standin-key.pem")
        cert_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            self._tls_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        tls.load_cert_chain(cert_file, key_file)
        self.login_port = await self._serve(login, tls)

    async def _serve(self, app: web.Application, tls: ssl.SSLContext | None) -> int:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        self._runners.append(runner)
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def stop(self) -> None:
        for held in self._held.values():
            held.release.set()
        for runner in self._runners:
            await runner.cleanup()

    # --- what tests set up and look at ---------------------------------------------------

    def fail_next(
        self, op: str, *, status: int = 429, retry_after: int = 1, code: str = ""
    ) -> None:
        """The next call of `op` fails (default: a 429 with Retry-After)."""
        self._failures.setdefault(op, []).append(
            Failure(status, retry_after if status == 429 else None, code or f"Error{status}")
        )

    def hold_next(self, op: str) -> Hold:
        """The next call of `op` waits, unanswered and with nothing done, until it is
        released; a call whose client went away meanwhile then does nothing (499)."""
        hold = Hold(asyncio.Event(), asyncio.Event())
        self._held[op] = hold
        return hold

    def calls_to(self, op: str) -> list[Call]:
        return [c for c in self.calls if c.op == op and c.status < 300]

    async def wait_for(self, op: str, count: int = 1, timeout: float = 15) -> list[Call]:
        """Wait until `op` succeeded `count` times."""

        async def enough() -> list[Call]:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.calls_to(op)) >= count)
            return self.calls_to(op)

        return await asyncio.wait_for(enough(), timeout)

    async def card(self, n: int = 1, timeout: float = 15) -> Posted:
        """The n-th question card posted (once it is)."""
        posts = [c for c in await self.wait_for("create", n, timeout)]
        call = posts[n - 1]
        assert call.activity_id is not None
        return Posted(call.conversation, call.activity_id, card_of(call.body))

    async def settle(self, seconds: float = 0.3) -> None:
        """Give in-flight work time to (not) happen, for 'nothing changed' checks."""
        await asyncio.sleep(seconds)

    def updates_of(self, posted: Posted) -> list[dict[str, Any]]:
        return [
            card_of(c.body)
            for c in self.calls_to("update")
            if (c.conversation, c.activity_id) == (posted.conversation, posted.activity_id)
        ]

    # --- the Bot Framework's side: tokens and keys ---------------------------------------

    def token_for(
        self,
        service_url: str,
        *,
        audience: str = APP_ID,
        issuer: str = ISSUER,
        key: SigningKey | None = None,
        lifetime: float = 3600,
        issued: float | None = None,
        alg: str = "RS256",
    ) -> str:
        """The Bot Connector service's token for an activity to the bot."""
        now = time.time() if issued is None else issued
        key = key or self.key
        claims = {
            "iss": issuer,
            "aud": audience,
            "serviceurl": service_url,
            "nbf": int(now) - 5,
            "exp": int(now + lifetime),
        }
        signer: Any = (
            key.private if alg.startswith("RS") else "a-shared-secret-of-at-least-32-bytes"
        )
        return jwt.encode(claims, signer, algorithm=alg, headers={"kid": key.kid})

    async def send(
        self,
        port: int,
        activity: dict[str, Any],
        *,
        token: str | None = None,
        authorization: str | None = None,
    ) -> tuple[int, Any]:
        """POST an activity to a bot's messaging endpoint, as the Bot Connector does;
        its status and body (JSON when there is one)."""
        if authorization is None:
            authorization = "Bearer " + (token or self.token_for(activity["serviceUrl"]))
        headers = {"Authorization": authorization} if authorization else {}
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"http://127.0.0.1:{port}/api/messages", json=activity, headers=headers
            ) as response:
                text = await response.text()
                try:
                    return response.status, json.loads(text) if text else None
                except ValueError:
                    return response.status, text

    async def _openid(self, request: web.Request) -> web.Response:
        self.metadata_reads += 1
        return web.json_response(
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": f"http://127.0.0.1:{self.port}/v1/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        return web.json_response({"keys": [self.key.jwk(), self.unendorsed.jwk()]})

    async def _tenant_config(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        base = f"{self.login_url}/{tenant}"
        return web.json_response(
            {
                "issuer": f"{base}/v2.0",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "jwks_uri": f"{base}/discovery/v2.0/keys",
                "token_endpoint_auth_methods_supported": ["client_secret_post"],
            }
        )

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        call = Call("token", request.match_info["tenant"], dict(form), None)
        if form.get("grant_type") != "client_credentials" or APPS.get(
            str(form.get("client_id"))
        ) != form.get("client_secret"):
            call.status = 401
            await self._record(call)
            return web.json_response(
                {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.",
                },
                status=401,
            )
        token = f"standin-bot-token-{uuid.uuid4().hex[:12]}"
        self.tokens_issued.append(token)
        self.token_apps[token] = str(form["client_id"])
        await self._record(call)
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": 3599,
                "ext_expires_in": 3599,
                "access_token": token,
            }
        )

    # --- the Bot Connector API -----------------------------------------------------------

    async def _record(self, call: Call) -> None:
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    async def _begin(
        self, op: str, request: web.Request, conversation: str
    ) -> tuple[Call, web.Response | None]:
        """Check the bot's token, apply an injected failure or hold; the call so far."""
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        body = await request.json() if request.body_exists else {}
        call = Call(op, conversation, body, token)
        if token not in self.tokens_issued:
            call.status = 401
            await self._record(call)
            return call, web.json_response({"message": "Authorization has been denied"}, status=401)
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
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else {}
            error = {"error": {"code": failure.code, "message": f"stand-in {failure.status}"}}
            return call, web.json_response(error, status=failure.status, headers=headers)
        size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
        if op in ("create", "update", "reply") and size > TEAMS_MAX_BYTES:
            call.status = 413
            await self._record(call)
            error = {"error": {"code": "MessageSizeTooBig", "message": "Message size too big"}}
            return call, web.json_response(error, status=413)
        return call, None

    def _new_id(self) -> str:
        self._n += 1
        return str(1700000000000 + self._n)

    async def _create(self, request: web.Request) -> web.Response:
        conversation = request.match_info["conversation"]
        body = await request.json() if request.body_exists else {}
        op = "reply" if ";messageid=" in conversation or "replyToId" in body else "create"
        call, refused = await self._begin(op, request, conversation)
        if refused is not None:
            return refused
        call.activity_id = self._new_id()
        await self._record(call)
        if self.on_create is not None and op == "create":
            self.on_create(call)
        return web.json_response({"id": call.activity_id}, status=201)

    async def _update(self, request: web.Request) -> web.Response:
        call, refused = await self._begin("update", request, request.match_info["conversation"])
        if refused is not None:
            return refused
        call.activity_id = request.match_info["activity"]
        await self._record(call)
        return web.json_response({"id": call.activity_id})

    async def _reply(self, request: web.Request) -> web.Response:
        call, refused = await self._begin("reply", request, request.match_info["conversation"])
        if refused is not None:
            return refused
        call.body["replyToId"] = request.match_info["activity"]
        call.activity_id = self._new_id()
        await self._record(call)
        return web.json_response({"id": call.activity_id}, status=201)

    async def _create_conversation(self, request: web.Request) -> web.Response:
        call, refused = await self._begin("create_conversation", request, "")
        if refused is not None:
            return refused
        members = call.body.get("members") or [{}]
        who = str(members[0].get("id", ""))
        if who not in self.installed_for:
            call.status = 403
            await self._record(call)
            error = {"error": {"code": "Forbidden", "message": "The bot is not installed"}}
            return web.json_response(error, status=403)
        call.conversation = f"a:personal-{who}"
        await self._record(call)
        return web.json_response({"id": call.conversation}, status=201)

    async def _member(self, request: web.Request) -> web.Response:
        conversation = request.match_info["conversation"]
        call, refused = await self._begin("member", request, conversation)
        if refused is not None:
            return refused
        user = PEOPLE.get(request.match_info["member"])
        await self._record(call)
        if user is None:
            return web.json_response({"error": {"code": "MemberNotFound"}}, status=404)
        return web.json_response(
            {
                "id": user.id,
                "name": user.name,
                "aadObjectId": user.object_id,
                "userPrincipalName": user.upn,
                "email": user.upn,
                "tenantId": TENANT,
            }
        )


def card_of(body: dict[str, Any]) -> dict[str, Any]:
    [attachment] = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    content: dict[str, Any] = attachment["content"]
    return content


def texts(card: Any) -> list[str]:
    """Every TextRun's text on the card, in order (where agent text may go)."""
    found: list[str] = []
    if isinstance(card, dict):
        if card.get("type") == "TextRun":
            found.append(card["text"])
        for value in card.values():
            found += texts(value)
    elif isinstance(card, list):
        for item in card:
            found += texts(item)
    return found


def shown(card: dict[str, Any]) -> str:
    """The card's words as a person reads them (runs joined, blocks on lines)."""
    lines: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "RichTextBlock":
                lines.append("".join(i["text"] for i in node["inlines"]))
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(card.get("body", []))
    return "\n".join(lines).replace("\u200b", "")


def actions(card: Any) -> list[dict[str, Any]]:
    """Every Action.Execute of the card (in the body's action sets and its actions)."""
    found: list[dict[str, Any]] = []
    if isinstance(card, dict):
        if card.get("type") == "Action.Execute" and card.get("verb") != "askq.refresh":
            found.append(card)
        for name, value in card.items():
            if name != "refresh":
                found += actions(value)
    elif isinstance(card, list):
        for item in card:
            found += actions(item)
    return found


def inputs(card: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(card, dict):
        if str(card.get("type", "")).startswith("Input."):
            found.append(card)
        for value in card.values():
            found += inputs(value)
    elif isinstance(card, list):
        for item in card:
            found += inputs(item)
    return found


@dataclass
class Posted:
    """A question card as the stand-in received it."""

    conversation: str
    activity_id: str
    card: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = self.card["refresh"]["action"]["data"]
        return data

    @property
    def request_id(self) -> str:
        return str(self.data["r"])

    @property
    def group(self) -> str:
        return str(self.data["g"])

    def button(self, title_start: str) -> dict[str, Any]:
        return next(a for a in actions(self.card) if a["title"].startswith(title_start))


# --- what Teams sends to the bot ---------------------------------------------------------


def activity(
    standin: TeamsStandIn,
    kind: str,
    who: User,
    *,
    conversation: str = CHANNEL,
    conversation_type: str = "channel",
    tenant: str = TENANT,
    app: str = APP_ID,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": kind,
        "id": f"f:{uuid.uuid4().hex[:12]}",
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
        "channelId": "msteams",
        "serviceUrl": standin.service_url,
        "from": who.account(),
        "conversation": {
            "id": conversation,
            "conversationType": conversation_type,
            "tenantId": tenant,
            "isGroup": conversation_type != "personal",
        },
        "recipient": {"id": f"28:{app}", "name": "askq"},
        "channelData": {"tenant": {"id": tenant}},
    }
    body.update(extra)
    return body


def click(
    standin: TeamsStandIn,
    posted: Posted,
    who: User,
    action: dict[str, Any],
    inputs_given: dict[str, str] | None = None,
    *,
    trigger: str = "manual",
) -> dict[str, Any]:
    """The `adaptiveCard/action` invoke of an Action.Execute on the posted card (Teams
    merges the card's input values into the action's data)."""
    conversation = posted.conversation
    if "@thread" in conversation and "@thread.v2" not in conversation:
        conversation = f"{conversation};messageid={posted.activity_id}"
    return activity(
        standin,
        "invoke",
        who,
        conversation=conversation,
        conversation_type="personal" if posted.conversation.startswith("a:") else "channel",
        name="adaptiveCard/action",
        replyToId=posted.activity_id,
        value={
            "action": {
                "type": "Action.Execute",
                "verb": action["verb"],
                "data": {**action.get("data", {}), **(inputs_given or {})},
            },
            "trigger": trigger,
        },
    )


def refresh(standin: TeamsStandIn, posted: Posted, who: User) -> dict[str, Any]:
    return click(standin, posted, who, posted.card["refresh"]["action"], trigger="automatic")


def installed(
    standin: TeamsStandIn,
    who: User,
    *,
    conversation: str = CHANNEL,
    conversation_type: str = "channel",
    team: str = "Ops",
    action: str = "add",
) -> dict[str, Any]:
    """The `installationUpdate` Teams sends when the app is added to (or removed from)
    a team, a group chat, or a person's personal scope."""
    body = activity(
        standin,
        "installationUpdate",
        who,
        conversation=conversation,
        conversation_type=conversation_type,
        action=action,
    )
    if conversation_type == "channel":
        body["channelData"].update(team={"id": conversation, "name": team})
    return body


# --- the Teams answerer against the stand-in ------------------------------------------------

ROUTES = {
    "tenant=acme": {"conversation": CHANNEL, "allow": [ALICE.object_id, BOB.upn]},
    "tenant=dm": {"user": CAROL.object_id},
    "*": CHANNEL,
}


def teams_settings(standin: TeamsStandIn, **extra: Any) -> TeamsSettings:
    """Settings of a Teams worker talking to the stand-in (`extra`: by field name)."""
    fields: dict[str, Any] = {
        "app_id": APP_ID,
        "app_password": APP_PASSWORD,
        "tenant_id": TENANT,
        "routes": json.dumps(ROUTES),
        "allowlist": ALICE.object_id,
        "service_url": standin.service_url,
        "login_url": standin.login_url,
        "openid_url": standin.openid_url,
        "http_host": "127.0.0.1",
        "http_port": 0,
    }
    fields.update(extra)
    return TeamsSettings(**fields)


@pytest.fixture
async def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TeamsStandIn]:
    s = TeamsStandIn(tmp_path)
    await s.start()
    # MSAL's requests session trusts the stand-in authority's certificate, as a
    # deployment behind a TLS-inspecting proxy trusts its CA.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(s.ca_file))
    try:
        yield s
    finally:
        await s.stop()
