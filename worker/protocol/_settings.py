"""The core's settings, read from `ASKQ_*` environment variables. A channel's own
settings live in a class of its own beside it (the Slack answerer's `SlackSettings`,
`ASKQ_SLACK_*`)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ._errors import AskError, ErrorCode
from ._text import error_message, problems_message


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASKQ_", extra="ignore")

    redis_url: str = Field(default="redis://localhost:6379/0", description="Where the queue lives.")
    prefix: str = Field(
        default="askq",
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Key prefix; also the Redis Cluster hash tag shared by every key.",
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Hash tags the deployment's keys spread over, so one deployment"
        " spreads over a Redis Cluster's masters (1: every key under {prefix}). Every"
        " process of a deployment must use the same number (`{prefix}:shards` records it).",
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
    cluster_retry_seconds: float = Field(
        default=30.0,
        gt=0,
        description="On a Redis Cluster: how long a command that did not run (its master"
        " unreachable or failing over, the cluster down) is tried again before it fails"
        " REDIS_UNAVAILABLE. Allow for the cluster's node timeout and a promotion.",
    )
    sentinel_retry_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Under Redis Sentinel: how long a connection to the master that"
        " cannot be made (the master down, no master yet: a failover) is tried again,"
        " asking the sentinels each time, before the command fails REDIS_UNAVAILABLE."
        " Allow for down-after-milliseconds and the promotion.",
    )
    settled_ttl: int = Field(
        default=86400,
        ge=1,
        description="Seconds a settled request stays readable (its reply at least 150 s,"
        " what an ask sent again after a lost reply finds).",
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
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve Prometheus metrics on this port in workers and sweepers"
        " (`--metrics-port`; needs the 'metrics' extra). 0: any free port.",
    )
    metrics_addr: str = Field(
        default="0.0.0.0",
        description="The address the metrics endpoint listens on (127.0.0.1: this host only).",
    )
    events_maxlen: int = Field(
        default=10000,
        ge=100,
        description="Approximate length the settlement event stream is trimmed to.",
    )
    audit_stream_maxlen: int = Field(
        default=0,
        ge=0,
        description="Also write every audit trail entry to the stream {prefix}:audit,"
        " trimmed to about this length (`askq audit tail` follows it); 0: no stream (each"
        " request's own trail is kept either way, for settled_ttl).",
    )
    recent_max: int = Field(
        default=10000,
        ge=1,
        description="Settled requests `askq requests` can list (the most recent; each"
        " for settled_ttl at most).",
    )
    event_loop: Literal["auto", "asyncio", "uvloop"] = Field(
        default="auto",
        description="The event loop the `askq` commands (workers, sweeper, ask) run on:"
        " `auto` is uvloop when it is installed (the 'uvloop' extra: 10-25 % less CPU per"
        " ask, docs/benchmarks.md), else asyncio. A program that embeds askq picks its"
        " own loop.",
    )


def settings_error(exc: ValidationError, prefix: str = "ASKQ_") -> AskError:
    """A CONFIG_ERROR naming each bad setting by its environment variable."""
    problems = problems_message(
        [
            f"{prefix}{'_'.join(str(p) for p in e['loc']).upper()}: {error_message(e)}"
            for e in exc.errors(include_url=False)
        ]
    )
    return AskError(ErrorCode.CONFIG_ERROR, f"settings: {problems}")


class ChannelSettings(BaseSettings):
    """Base of a channel's own settings: a pydantic-settings class with its own
    `env_prefix` (the Slack answerer's is `ASKQ_SLACK_`). `from_env()` reads them; a
    malformed variable is one CONFIG_ERROR naming it, at the channel's start-up."""

    model_config = SettingsConfigDict(extra="ignore")

    @classmethod
    def from_env(cls) -> Self:
        try:
            return cls()
        except ValidationError as exc:
            raise settings_error(exc, str(cls.model_config.get("env_prefix", ""))) from None
