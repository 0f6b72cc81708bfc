"""The MCP server's own settings, read from `ASKQ_MCP_*` (the core's `ASKQ_*` settings
say where Redis is)."""

from __future__ import annotations

import json

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings
from askq.protocol._checks import parse_scope


class McpSettings(ChannelSettings):
    model_config = SettingsConfigDict(env_prefix="ASKQ_MCP_", extra="ignore")

    agent_id: str = Field(
        default="mcp",
        min_length=1,
        max_length=200,
        description="The agent that asks, unless a connection names its own"
        " (`_meta` io.askq/agent, or the Askq-Agent header).",
    )
    owner: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The agent that owns it (a live owner makes asks DELEGATED_CALLER).",
    )
    # JSON text, parsed here: as a typed dict, a malformed value would fail in
    # pydantic-settings' own parsing, before any message could name the variable.
    scope: str = Field(
        default="{}",
        description='Routing labels of every ask, a JSON object of strings: {"tenant": "acme"}.',
    )
    client_identity: bool = Field(
        default=True,
        description="Let a connection name its agent, owner and turn (`_meta` io.askq/*,"
        " Askq-* headers); off: the settings alone say who asks.",
    )
    progress_interval: float = Field(
        default=15.0,
        gt=0,
        description="Seconds between progress notifications while a question waits"
        " (sent when the client gave a progress token).",
    )
    reattach_grace: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a question outlives a dropped connection, so a re-issued"
        " call can reattach to it; then it is withdrawn. An explicit"
        " notifications/cancelled withdraws it at once.",
    )
    handle_mode: bool = Field(
        default=False,
        description="Expose ask_user_question returning a handle at once, and"
        " get_user_answer(handle, wait_seconds), for clients with a short tool timeout.",
    )
    max_wait: float = Field(
        default=45.0,
        gt=0,
        description="Handle mode: the most get_user_answer waits before it answers"
        " 'still pending' (keep it under the client's tool timeout).",
    )
    first_wait: float = Field(
        default=1.0,
        ge=0,
        description="Handle mode: how long ask_user_question waits for an outcome"
        " (an error such as NO_ANSWERER, or an answer by rules) before it returns the handle.",
    )

    @field_validator("scope")
    @classmethod
    def _labels(cls, value: str) -> str:
        try:
            parsed = json.loads(value)
        except ValueError:
            raise ValueError('not JSON; expected an object such as {"tenant": "acme"}') from None
        if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
            raise ValueError('expected a JSON object of strings, such as {"tenant": "acme"}')
        try:  # the core's own check of routing labels, at start-up rather than per call
            parse_scope(parsed)
        except AskError as exc:
            raise ValueError(exc.message) from None
        return value

    @property
    def scope_labels(self) -> dict[str, str]:
        labels: dict[str, str] = json.loads(self.scope)
        return labels
