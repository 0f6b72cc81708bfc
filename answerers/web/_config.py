"""The web answerer's settings: its own `WebSettings` (`ASKQ_WEB_*` variables), checked
at start-up into a `WebConfig`, so a replica with a missing or malformed setting stops
before it goes live."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings, ErrorCode

from ._access import Access, parse_access
from ._signin import SignIn, parse_networks, parse_users

MIN_SECRET = 16


class WebSettings(ChannelSettings):
    """Every `ASKQ_WEB_*` variable."""

    model_config = SettingsConfigDict(env_prefix="ASKQ_WEB_", extra="ignore")

    secret: SecretStr | None = Field(
        default=None,
        description="Signs session cookies and signed links; several, comma-separated, for"
        " rotation (the first signs, all verify). At least 16 characters each.",
    )
    users: str = Field(
        default="",
        description='Token sign-in: {"alice": "sha256:<hex>"} or alice=sha256:<hex>,... (the'
        " SHA-256 of each user's token; `python -m askq.answerers.web token` makes a pair).",
    )
    proxy_header: str = Field(
        default="",
        description="Header a trusted reverse proxy sets to the signed-in user"
        " (e.g. X-Forwarded-Email).",
    )
    trusted_proxies: str = Field(
        default="",
        description="Addresses (or networks) whose identity header is believed, comma-separated.",
    )
    routes: str = Field(
        default="",
        description='JSON: scope selector -> who may answer there, first match wins, "*" last;'
        ' {"tenant=acme": ["alice"], "*": "*"}. Unset: "*" with ASKQ_WEB_ALLOWLIST.',
    )
    allowlist: str = Field(
        default="*",
        description='Users who may answer where a route names none; "*": every signed-in user.',
    )
    host: str = Field(default="127.0.0.1", description="Where the pages are served.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port of the pages.")
    public_url: str = Field(
        default="",
        description="The URL people open (https://... behind TLS): session cookies are then"
        " Secure, and links are minted against it.",
    )
    session_hours: float = Field(default=12.0, gt=0, description="How long a sign-in lasts.")


@dataclass(frozen=True)
class WebConfig:
    secrets: tuple[str, ...]
    signin: SignIn
    access: Access
    host: str
    port: int
    public_url: str
    secure_cookies: bool
    session_seconds: int

    @classmethod
    def from_settings(cls, settings: WebSettings) -> WebConfig:
        raw = settings.secret.get_secret_value() if settings.secret is not None else ""
        secrets = tuple(s.strip() for s in raw.split(",") if s.strip())
        if not secrets:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_WEB_SECRET is not set: the web answerer signs its session cookies and"
                " links with it (at least 16 random characters)",
            )
        if any(len(s) < MIN_SECRET for s in secrets):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_WEB_SECRET: each secret needs at least {MIN_SECRET} characters",
            )
        signin = SignIn(
            users=parse_users(settings.users),
            proxy_header=settings.proxy_header.strip() or None,
            trusted_proxies=parse_networks(settings.trusted_proxies, "ASKQ_WEB_TRUSTED_PROXIES"),
        )
        if signin.proxy_header and not signin.trusted_proxies:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_WEB_PROXY_HEADER is set but ASKQ_WEB_TRUSTED_PROXIES is not: name the"
                " proxy's addresses, or anyone could claim any identity with the header",
            )
        if not signin.users and not signin.proxy_header:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "nobody can sign in: set ASKQ_WEB_USERS (token sign-in) or"
                " ASKQ_WEB_PROXY_HEADER with ASKQ_WEB_TRUSTED_PROXIES (a reverse proxy's identity)",
            )
        public_url = settings.public_url.strip().rstrip("/")
        if public_url and not public_url.startswith(("https://", "http://")):
            raise AskError(
                ErrorCode.CONFIG_ERROR, f"ASKQ_WEB_PUBLIC_URL: {public_url!r} is not an http(s) URL"
            )
        return cls(
            secrets=secrets,
            signin=signin,
            access=parse_access(settings.routes, settings.allowlist),
            host=settings.host,
            port=settings.port,
            public_url=public_url,
            secure_cookies=public_url.startswith("https://"),
            session_seconds=int(settings.session_hours * 3600),
        )
