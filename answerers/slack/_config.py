"""The Slack answerer's settings, read from the one `Settings` object and checked at
start-up, so a worker with a missing or malformed setting stops before it goes live."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretStr

from askq import AskError, ErrorCode, Settings

from ._routes import Routes, parse_routes


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

    @classmethod
    def from_settings(cls, settings: Settings) -> SlackConfig:
        bot_token = _secret(settings.slack_bot_token)
        if not bot_token:
            raise _missing("ASKQ_SLACK_BOT_TOKEN", "the app's bot token (xoxb-...)")
        if not bot_token.startswith(("xoxb-", "xoxp-")):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_SLACK_BOT_TOKEN: expected a bot token starting with xoxb-",
            )
        app_token = _secret(settings.slack_app_token)
        if app_token and not app_token.startswith("xapp-"):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_SLACK_APP_TOKEN: expected an app-level token starting with xapp-",
            )
        signing_secret = _secret(settings.slack_signing_secret)
        socket_mode = (
            settings.slack_socket_mode
            if settings.slack_socket_mode is not None
            else bool(app_token)
        )
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
        if not settings.slack_api_url.startswith(("https://", "http://")):
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                f"ASKQ_SLACK_API_URL: {settings.slack_api_url!r} is not an http(s) URL",
            )
        return cls(
            bot_token=bot_token,
            app_token=app_token,
            signing_secret=signing_secret,
            socket_mode=socket_mode,
            http_host=settings.slack_http_host,
            http_port=settings.slack_http_port,
            api_url=settings.slack_api_url,
            routes=parse_routes(settings.slack_routes, settings.slack_allowlist),
        )


def _secret(value: SecretStr | None) -> str | None:
    text = value.get_secret_value().strip() if value is not None else ""
    return text or None


def _missing(var: str, what: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, f"{var} is not set: the Slack answerer needs {what}")
