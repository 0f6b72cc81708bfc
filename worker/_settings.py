"""The one Settings object: every knob, read from `ASKQ_*` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    events_maxlen: int = Field(
        default=10000,
        ge=100,
        description="Approximate length the settlement event stream is trimmed to.",
    )
