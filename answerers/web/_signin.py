"""Who is at the other end of a request: a user signed in with a personal token (kept
only as its SHA-256, `ASKQ_WEB_USERS`), or the identity a trusted reverse proxy puts in
a header (oauth2-proxy's `X-Forwarded-Email`, an identity-aware proxy's), believed only
from the configured proxy addresses. Both end in a signed session cookie, which also
carries the CSRF token every POST must echo.

Tokens are random (`new_token`), so one SHA-256 is enough to keep them safe at rest: a
guess has to hit a 192-bit secret, which no slow hash would make harder.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from askq import AskError, ErrorCode

from ._access import USER_NAME

log = logging.getLogger("askq.web")

USERS_VAR = "ASKQ_WEB_USERS"
HASH_PREFIX = "sha256:"
CSRF_FIELD = "csrf"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def new_token() -> str:
    return secrets.token_urlsafe(24)


def hash_token(token: str) -> str:
    """What `ASKQ_WEB_USERS` keeps of a token."""
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def parse_users(text: str) -> dict[str, str]:
    """`{"alice": "sha256:<hex>", ...}` or `alice=sha256:<hex>,bob=...`: user -> hash."""
    text = text.strip()
    if not text:
        return {}
    raw: Any
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise _config_error(f"{USERS_VAR}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise _config_error(f"{USERS_VAR}: expected a JSON object of user -> token hash")
    else:
        raw = {}
        for pair in text.split(","):
            name, sep, digest = pair.strip().partition("=")
            if not sep:
                raise _config_error(
                    f"{USERS_VAR}: expected user=sha256:<hex>, got {pair.strip()!r}"
                )
            raw[name.strip()] = digest.strip()
    users: dict[str, str] = {}
    for name, digest in raw.items():
        if not isinstance(name, str) or not USER_NAME.match(name):
            raise _config_error(f"{USERS_VAR}: {name!r} is not a user name")
        hexpart = digest[len(HASH_PREFIX) :] if isinstance(digest, str) else ""
        if not (isinstance(digest, str) and digest.startswith(HASH_PREFIX) and len(hexpart) == 64):
            raise _config_error(
                f"{USERS_VAR}[{name!r}]: expected sha256:<64 hex digits>, the hash of the"
                " user's token (python -m askq.answerers.web token makes one); never the token"
            )
        try:
            bytes.fromhex(hexpart)
        except ValueError:
            raise _config_error(f"{USERS_VAR}[{name!r}]: the hash is not hex") from None
        users[name] = digest.lower()
    return users


def parse_networks(text: str, var: str) -> tuple[Network, ...]:
    networks = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise _config_error(f"{var}: {part!r} is not an IP address or network") from None
    return tuple(networks)


@dataclass(frozen=True)
class SignIn:
    users: Mapping[str, str]  # user -> token hash
    proxy_header: str | None  # the identity header a trusted proxy sets
    trusted_proxies: tuple[Network, ...]

    def user_for_token(self, token: str) -> str | None:
        """The user whose token this is. Every hash is compared (in constant time), so
        the time taken does not tell which user came close."""
        digest = hash_token(token.strip())
        found = None
        for name, expected in self.users.items():
            if hmac.compare_digest(digest, expected):
                found = name
        return found

    def from_proxy(self, request: Request) -> str | None:
        """The proxy's identity header, if the request comes from a trusted proxy."""
        if not self.proxy_header:
            return None
        value = request.headers.get(self.proxy_header)
        if value is None:
            return None
        peer = request.client.host if request.client else ""
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            address = None
        if address is None or not any(address in net for net in self.trusted_proxies):
            log.warning("ignored %s from %s: not a trusted proxy", self.proxy_header, peer)
            return None
        value = value.strip()
        if not USER_NAME.match(value):
            log.warning("ignored %s: %r is not a user name", self.proxy_header, value[:80])
            return None
        return value


def current_user(request: Request, signin: SignIn) -> str | None:
    """The signed-in user (the proxy's word first, then the session), or None."""
    proxied = signin.from_proxy(request)
    if proxied is not None:
        if request.session.get("user") != proxied:
            request.session["user"] = proxied
        return proxied
    user = request.session.get("user")
    return user if isinstance(user, str) else None


def csrf_token(request: Request) -> str:
    token = request.session.get(CSRF_FIELD)
    if not isinstance(token, str) or len(token) < 16:
        token = secrets.token_urlsafe(24)
        request.session[CSRF_FIELD] = token
    return token


def csrf_ok(request: Request, form: Mapping[str, Any]) -> bool:
    expected = request.session.get(CSRF_FIELD)
    given = form.get(CSRF_FIELD)
    return (
        isinstance(expected, str)
        and isinstance(given, str)
        and hmac.compare_digest(expected.encode(), given.encode())
    )
