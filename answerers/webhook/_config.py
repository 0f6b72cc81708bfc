"""The webhook answerer's settings: its own `WebhookSettings` (`ASKQ_WEBHOOK_*`
variables), checked at start-up into a `WebhookConfig`, so a worker with a missing or
malformed setting stops before it goes live.

Where a question goes is a route: `ASKQ_WEBHOOK_URL` for every scope, or
`ASKQ_WEBHOOK_ROUTES` (scope selector -> URL, the table Slack and Teams read) to send
tenants' questions to receivers of their own. One secret signs every POST of the group
(Standard Webhooks: `whsec_` and the key in base64, as the receiver's library takes it).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings, ErrorCode, RouteTable

SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES = 24  # Standard Webhooks: between 24 and 64 bytes
MAX_KEY_BYTES = 64
ROUTES_EXAMPLE = '{"tenant=acme": "https://acme.example/askq", "*": "https://ops.example/askq"}'

Routes = RouteTable[str]


class WebhookSettings(ChannelSettings):
    """Every `ASKQ_WEBHOOK_*` variable."""

    model_config = SettingsConfigDict(env_prefix="ASKQ_WEBHOOK_", extra="ignore")

    url: str = Field(default="", description="Where every question is POSTed (http(s) URL).")
    routes: str = Field(
        default="",
        description='JSON: scope selector -> URL, first match wins, "*" last; a scope no'
        f" route matches is declined. Instead of ASKQ_WEBHOOK_URL. E.g. {ROUTES_EXAMPLE}",
    )
    secret: SecretStr | None = Field(
        default=None,
        description="The signing secret, whsec_<base64 of 24-64 random bytes>; the receiver"
        " verifies with it (and the answer tokens are derived from it).",
    )
    public_url: str = Field(
        default="",
        description="The base URL receivers reach this group's callback at (e.g."
        " https://askq.example.com); default http://HTTP_HOST:HTTP_PORT.",
    )
    http_host: str = Field(default="127.0.0.1", description="Where the callback listens.")
    http_port: int = Field(default=8795, ge=0, le=65535, description="Port of the callback.")
    tries: int = Field(
        default=8,
        ge=1,
        le=30,
        description="POSTs of a question before the group gives it up (the waterfall"
        " moves on); a 4xx other than 408/425/429 gives up at once.",
    )
    timeout: float = Field(
        default=10.0, gt=0, le=120, description="Seconds one POST may take (then retried)."
    )


@dataclass(frozen=True)
class WebhookConfig:
    routes: Routes
    secret: str  # whsec_...
    key: bytes  # the secret's bytes (answer tokens are derived from them)
    public_url: str  # no trailing slash; "": the callback's own http://host:port
    http_host: str
    http_port: int
    tries: int
    timeout: float

    @classmethod
    def from_settings(cls, settings: WebhookSettings) -> WebhookConfig:
        secret = settings.secret.get_secret_value().strip() if settings.secret else ""
        if not secret:
            raise _error(
                "ASKQ_WEBHOOK_SECRET is not set: the webhook answerer signs every POST"
                " (whsec_ and 24-64 random bytes in base64, e.g. from"
                " python -c \"import base64,os; print('whsec_' + base64.b64encode("
                'os.urandom(32)).decode())")'
            )
        key = _key(secret)
        if settings.routes.strip() and settings.url.strip():
            raise _error("ASKQ_WEBHOOK_URL and ASKQ_WEBHOOK_ROUTES are both set: set one")
        if settings.routes.strip():
            routes = Routes.parse(
                settings.routes, var="ASKQ_WEBHOOK_ROUTES", example=ROUTES_EXAMPLE, build=_url
            )
        elif settings.url.strip():
            routes = Routes((({}, _url(settings.url, "ASKQ_WEBHOOK_URL")),))
        else:
            raise _error(
                "ASKQ_WEBHOOK_URL is not set: the webhook answerer needs where to POST"
                " questions (or ASKQ_WEBHOOK_ROUTES, a URL per scope)"
            )
        public = settings.public_url.strip()
        if public:  # unset: the callback's own address, once it listens
            public = _url(public, "ASKQ_WEBHOOK_PUBLIC_URL")
        return cls(
            routes=routes,
            secret=SECRET_PREFIX + base64.b64encode(key).decode(),
            key=key,
            public_url=public.rstrip("/"),
            http_host=settings.http_host,
            http_port=settings.http_port,
            tries=settings.tries,
            timeout=settings.timeout,
        )


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise _error("ASKQ_WEBHOOK_SECRET: expected whsec_ followed by the key in base64")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise _error("ASKQ_WEBHOOK_SECRET: the part after whsec_ is not base64") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise _error(
            f"ASKQ_WEBHOOK_SECRET: the key is {len(key)} bytes; Standard Webhooks asks for"
            f" {MIN_KEY_BYTES} to {MAX_KEY_BYTES}"
        )
    return key


def _url(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _error(f"{where}: expected a URL (text), got {type(value).__name__}")
    url = value.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _error(f"{where}: {url!r} is not an http(s) URL")
    return url


def _error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)
