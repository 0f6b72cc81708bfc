"""The Discord answerer's settings: its own `DiscordSettings` (`ASKQ_DISCORD_*`
variables), checked at start-up into a `DiscordConfig`, so a worker with a missing or
malformed setting stops before it goes live."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings, ErrorCode

from ._routes import SNOWFLAKE, Routes, parse_routes

API_URL = "https://discord.com/api/v10"
PUBLIC_KEY = re.compile(r"^[0-9a-fA-F]{64}$")


class DiscordSettings(ChannelSettings):
    """Every `ASKQ_DISCORD_*` variable. Routes and allowlist are plain text, parsed by
    `DiscordConfig` at start-up so an error names the variable at fault."""

    model_config = SettingsConfigDict(env_prefix="ASKQ_DISCORD_", extra="ignore")

    application_id: str = Field(
        default="", description="The application's id (Developer Portal, General Information)."
    )
    public_key: str = Field(
        default="",
        description="The application's public key (hex): every interaction is checked with it.",
    )
    bot_token: SecretStr | None = Field(
        default=None, description="The bot's token (Developer Portal, Bot): posts and edits."
    )
    routes: str = Field(
        default="",
        description='JSON: scope selector -> channel id or {"user": user id}, first match wins,'
        ' "*" last: {"tenant=acme": {"channel": "123...", "allow": ["456...", "role:789..."]}}.',
    )
    allowlist: str = Field(
        default="",
        description="Who may answer where a route names nobody: user ids and role:<role id>"
        ' (JSON list or comma-separated); "*" lets anyone who sees the message answer.',
    )
    http_host: str = Field(
        default="127.0.0.1", description="Where the interactions endpoint listens."
    )
    http_port: int = Field(
        default=3979,
        ge=0,
        le=65535,
        description="Port of the interactions endpoint (/interactions).",
    )
    api_url: str = Field(
        default=API_URL, description="Discord's REST API (v10); a proxy's, or a test's stand-in."
    )
    max_skew: int = Field(
        default=300,
        ge=5,
        le=3600,
        description="Seconds an interaction's X-Signature-Timestamp may be off this clock.",
    )


@dataclass(frozen=True)
class DiscordConfig:
    application_id: str
    public_key: bytes
    bot_token: str
    routes: Routes
    http_host: str
    http_port: int
    api_url: str
    max_skew: int

    @classmethod
    def from_settings(cls, settings: DiscordSettings) -> DiscordConfig:
        application_id = settings.application_id.strip()
        if not application_id:
            raise _missing("ASKQ_DISCORD_APPLICATION_ID", "the application's id")
        if not SNOWFLAKE.match(application_id):
            raise _error(
                f"ASKQ_DISCORD_APPLICATION_ID: {application_id!r} is not an application id"
                " (17-20 digits)"
            )
        public_key = settings.public_key.strip()
        if not public_key:
            raise _missing(
                "ASKQ_DISCORD_PUBLIC_KEY", "the application's public key, to check interactions"
            )
        if not PUBLIC_KEY.match(public_key):
            raise _error(
                "ASKQ_DISCORD_PUBLIC_KEY: not an Ed25519 public key (64 hex digits, as the"
                " Developer Portal shows it)"
            )
        token = settings.bot_token.get_secret_value().strip() if settings.bot_token else ""
        if not token:
            raise _missing("ASKQ_DISCORD_BOT_TOKEN", "the bot's token, to post questions")
        api_url = settings.api_url.strip().rstrip("/")
        if not api_url.startswith(("https://", "http://")):
            raise _error(f"ASKQ_DISCORD_API_URL: {api_url!r} is not an http(s) URL")
        return cls(
            application_id=application_id,
            public_key=bytes.fromhex(public_key),
            bot_token=token,
            routes=parse_routes(settings.routes, settings.allowlist),
            http_host=settings.http_host,
            http_port=settings.http_port,
            api_url=api_url,
            max_skew=settings.max_skew,
        )


def _error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def _missing(var: str, what: str) -> AskError:
    return _error(f"{var} is not set: the Discord answerer needs {what}")
