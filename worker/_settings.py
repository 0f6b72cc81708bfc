"""The one Settings object: every knob, read from `ASKQ_*` environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ._errors import AskError, ErrorCode


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASKQ_", extra="ignore")

    redis_url: str = Field(default="redis://localhost:6379/0", description="Where the queue lives.")
    prefix: str = Field(
        default="askq",
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Key prefix; also the Redis Cluster hash tag shared by every key.",
    )
    max_connections: int = Field(
        default=6,
        ge=2,
        description="Connections one process opens for commands, however many asks are"
        " pending; the reply waiter and each worker loop hold one more each.",
    )
    block_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long one blocking read waits before it is re-issued (liveness"
        " of the connection, not polling: a write wakes it at once).",
    )
    socket_timeout: float = Field(default=5.0, gt=0, description="For non-blocking commands.")
    settled_ttl: int = Field(
        default=86400, ge=1, description="Seconds a settled request stays readable."
    )
    abort_ttl: int = Field(default=86400, ge=1, description="Seconds a turn stays marked aborted.")
    agent_ttl: float = Field(
        default=15.0, gt=0, description="An agent is live this long after its last heartbeat."
    )
    consumer_ttl: float = Field(
        default=15.0,
        gt=0,
        description="An answerer replica is live this long after its last heartbeat; its"
        " pending offers are recovered by another replica once it has been gone this long.",
    )
    caller_ttl: float = Field(
        default=30.0,
        gt=0,
        description="A caller process is live this long after its last heartbeat; once"
        " it is gone this long, the sweeper cancels its pending asks.",
    )
    decision_window: float = Field(
        default=30.0,
        ge=0,
        description="Default seconds a group has to accept or decline an offer before it"
        " counts as declined (0: no window). A group may set its own.",
    )
    orphan_claim_after: float = Field(
        default=300.0,
        gt=0,
        description="A claim held by a group with no live replica this long is released"
        " by the sweeper, so the waterfall moves on.",
    )
    poll_delay: float = Field(
        default=0.5,
        gt=0,
        description="Seconds between arq's polls of a job queue (sweeper maintenance,"
        " channel sends). Timers do not poll: they wait on a blocking read.",
    )
    sweep_interval: float = Field(
        default=5.0,
        gt=0,
        description="Seconds between the sweeper's maintenance rounds (dead callers,"
        " orphaned claims, stream trimming, missed timers).",
    )
    hook_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds an answerer's decide, answer_at_once, present, retract, remind"
        " or stop may take before it counts as failed (a decline or a release follows).",
    )
    events_maxlen: int = Field(
        default=10000,
        ge=100,
        description="Approximate length the settlement event stream is trimmed to.",
    )

    # --- Slack (answerers/slack) ---
    # Routes and allowlist are plain JSON text, parsed by the Slack answerer at its
    # start-up: typed as dicts, a malformed value would break every askq command (even
    # `askq ask`) before any of them could say which setting is wrong.
    slack_bot_token: SecretStr | None = Field(
        default=None, description="Slack bot token (xoxb-...): posts and updates questions."
    )
    slack_app_token: SecretStr | None = Field(
        default=None,
        description="Slack app-level token (xapp-..., connections:write); turns on Socket Mode.",
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None, description="Checks the signatures of the Slack HTTP interactivity endpoint."
    )
    slack_routes: str = Field(
        default="",
        description='JSON: scope selector -> channel or user id (DM), first match wins, "*" last:'
        ' {"tenant=acme": {"channel": "C0ACME", "allow": ["U01"]}, "*": "C0GENERAL"}.',
    )
    slack_allowlist: str = Field(
        default="",
        description="Slack user ids who may answer where a route names none (JSON list or"
        ' comma-separated); "*" lets anyone who sees the message answer.',
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/", description="Slack Web API base URL."
    )
    slack_socket_mode: bool | None = Field(
        default=None,
        description="Receive clicks over Socket Mode (default: on when the app token is set);"
        " off: over the signed HTTP endpoint.",
    )
    slack_http_host: str = Field(
        default="127.0.0.1", description="Where the HTTP interactivity endpoint listens."
    )
    slack_http_port: int = Field(
        default=3000, ge=0, le=65535, description="Port of the HTTP interactivity endpoint."
    )


def settings_error(exc: ValidationError) -> AskError:
    """A CONFIG_ERROR naming each bad setting by its environment variable."""
    problems = "; ".join(
        f"ASKQ_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
    )
    return AskError(ErrorCode.CONFIG_ERROR, f"settings: {problems}")
