"""The Slack answerer's settings: its own `SlackSettings` (`ASKQ_SLACK_*` variables),
checked at start-up into a `SlackConfig`, so a worker with a missing or malformed
setting stops before it goes live."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings, ErrorCode

from ._browser import BrowserLinks, browser_links
from ._routes import Routes, parse_routes


class SlackSettings(ChannelSettings):
    """Every `ASKQ_SLACK_*` variable. Routes and allowlist are plain JSON text, parsed
    by `SlackConfig` at start-up: as typed dicts, a malformed value would fail without
    the message that names the route at fault."""

    model_config = SettingsConfigDict(env_prefix="ASKQ_SLACK_", extra="ignore")

    bot_token: SecretStr | None = Field(
        default=None, description="Slack bot token (xoxb-...): posts and updates questions."
    )
    app_token: SecretStr | None = Field(
        default=None,
        description="Slack app-level token (xapp-..., connections:write); turns on Socket Mode.",
    )
    signing_secret: SecretStr | None = Field(
        default=None, description="Checks the signatures of the Slack HTTP interactivity endpoint."
    )
    routes: str = Field(
        default="",
        description='JSON: scope selector -> channel or user id (DM), first match wins, "*" last:'
        ' {"tenant=acme": {"channel": "C0ACME", "allow": ["U01"]}, "*": "C0GENERAL"}.',
    )
    allowlist: str = Field(
        default="",
        description="Slack user ids who may answer where a route names none (JSON list or"
        ' comma-separated); "*" lets anyone who sees the message answer.',
    )
    api_url: str = Field(default="https://slack.com/api/", description="Slack Web API base URL.")
    socket_mode: bool | None = Field(
        default=None,
        description="Receive clicks over Socket Mode (default: on when the app token is set);"
        " off: over the signed HTTP endpoint.",
    )
    http_host: str = Field(
        default="127.0.0.1", description="Where the HTTP interactivity endpoint listens."
    )
    http_port: int = Field(
        default=3000, ge=0, le=65535, description="Port of the HTTP interactivity endpoint."
    )
    web_url: str = Field(
        default="",
        description="The web inbox's public URL (https://askq.example.com): each question"
        ' message then carries an "Open in browser" button.',
    )
    link_secret: SecretStr | None = Field(
        default=None,
        description="One of the web inbox's ASKQ_WEB_SECRET secrets: signs the per-person"
        " single-question links of DM routes (channel posts link to the sign-in page).",
    )
    web_group: str = Field(default="web", description="The web group the signed links answer for.")
    link_ttl: float = Field(
        default=86400.0, gt=0, description="Seconds a DM's signed link stays valid."
    )


@dataclass(frozen=True)
class SlackConfig:
    bot_token: str
    app_token: str | None
    signing_secret: str | None
    socket_mode: bool  # receive over Socket Mode; else over the signed HTTP endpoint
    http_host: str
    http_port: int
    api_url: str
    routes: Routes
    browser: BrowserLinks | None = None  # "Open in browser" (ASKQ_SLACK_WEB_URL)

    @classmethod
    def from_settings(cls, settings: SlackSettings) -> SlackConfig:
        bot_token = _secret(settings.bot_token)
        if not bot_token:
            raise _missing("ASKQ_SLACK_BOT_TOKEN", "the app's bot token (xoxb-...)")
        if not bot_token.startswith(("xoxb-", "xoxp-")):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_SLACK_BOT_TOKEN: expected a bot token starting with xoxb-",
            )
        app_token = _secret(settings.app_token)
        if app_token and not app_token.startswith("xapp-"):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_SLACK_APP_TOKEN: expected an app-level token starting with xapp-",
            )
        signing_secret = _secret(settings.signing_secret)
        socket_mode = settings.socket_mode if settings.socket_mode is not None else bool(app_token)
        if socket_mode and not app_token:
            raise _missing(
                "ASKQ_SLACK_APP_TOKEN",
                "an app-level token (xapp-..., scope connections:write) for Socket Mode;"
                " or set ASKQ_SLACK_SOCKET_MODE=false and ASKQ_SLACK_SIGNING_SECRET to"
                " receive clicks over HTTP",
            )
        if not socket_mode and not signing_secret:
            raise _missing(
                "ASKQ_SLACK_SIGNING_SECRET",
                "the app's signing secret, to check the requests of the HTTP interactivity"
                " endpoint; or set ASKQ_SLACK_APP_TOKEN to use Socket Mode",
            )
        if not settings.api_url.startswith(("https://", "http://")):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_SLACK_API_URL: {settings.api_url!r} is not an http(s) URL",
            )
        return cls(
            bot_token=bot_token,
            app_token=app_token,
            signing_secret=signing_secret,
            socket_mode=socket_mode,
            http_host=settings.http_host,
            http_port=settings.http_port,
            api_url=settings.api_url,
            routes=parse_routes(settings.routes, settings.allowlist),
            browser=browser_links(
                settings.web_url,
                settings.link_secret.get_secret_value() if settings.link_secret else "",
                settings.web_group,
                settings.link_ttl,
            ),
        )


def _secret(value: SecretStr | None) -> str | None:
    text = value.get_secret_value().strip() if value is not None else ""
    return text or None


def _missing(var: str, what: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, f"{var} is not set: the Slack answerer needs {what}")
