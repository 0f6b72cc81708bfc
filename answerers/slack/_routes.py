"""Where a question goes in Slack, and who may answer it there.

`ASKQ_SLACK_ROUTES` is a JSON object checked in written order, first match wins, `"*"`
(the default) last wherever it is written::

    {"tenant=acme": {"channel": "C0ACME", "allow": ["U01AAA", "U01BBB"]},
     "tenant=beta-*,env=prod": "U01ONCALL",
     "*": "C0GENERAL"}

A key is a scope selector, `key=pattern` pairs joined by commas, with the shell-style
patterns of `askq worker --scope`. A value is a target (a channel id, `#name`, or a user
id for a DM with the app) or an object with `channel` and an optional `allow` list.
Who may answer: the route's `allow`, else `ASKQ_SLACK_ALLOWLIST`; and on a DM route
the user it goes to. `"*"` in a list lets anyone who sees the message answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from askq import AskError, ErrorCode, RouteTable

from .._allowlist import ANYONE, Allowlist

ROUTES_VAR = "ASKQ_SLACK_ROUTES"
ALLOWLIST_VAR = "ASKQ_SLACK_ALLOWLIST"

USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
TARGET = re.compile(r"^(?:[CGDUW][A-Z0-9]{2,}|#[a-z0-9][a-z0-9_-]{0,79})$")
EXAMPLE = '{"tenant=acme": "C0ACME", "*": "C0GENERAL"}'
USERS = Allowlist(USER_ID, "Slack user ids", "a Slack user id (U... or W...)")


@dataclass(frozen=True)
class Route:
    channel: str  # a channel id, "#name", or a user id (the app's DM with that user)
    allow: frozenset[str]

    def allows(self, user_id: str) -> bool:
        return ANYONE in self.allow or user_id in self.allow


Routes = RouteTable[Route]


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def _route(value: Any, where: str, default_allow: frozenset[str] | None) -> Route:
    if isinstance(value, str):
        value = {"channel": value}
    if not isinstance(value, dict):
        raise _config_error(f'{where}: expected a channel id or {{"channel": ..., "allow": [...]}}')
    unknown = set(value) - {"channel", "allow"}
    if unknown:
        raise _config_error(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    channel = value.get("channel")
    if not isinstance(channel, str) or not TARGET.match(channel):
        raise _config_error(
            f"{where}.channel: {channel!r} is not a channel id (C...), #name or user id (U...)"
        )
    if "allow" in value:
        allow = USERS.parse(value["allow"], f"{where}.allow")
    else:
        allow = default_allow or frozenset()
    if USER_ID.match(channel):
        allow |= {channel}  # a DM: the one person who sees it may answer it
    if not allow:
        raise _config_error(
            f'{where}: nobody may answer in {channel}; give "allow": [user ids] or set'
            f' {ALLOWLIST_VAR} (user ids, or "{ANYONE}" for anyone who sees the message)'
        )
    return Route(channel=channel, allow=allow)


def parse_routes(routes_text: str, allowlist_text: str) -> Routes:
    """Read the two settings; every problem is a CONFIG_ERROR naming the variable."""
    default_allow: frozenset[str] | None = None
    if allowlist_text.strip():
        default_allow = USERS.parse_setting(allowlist_text, ALLOWLIST_VAR)
    if not routes_text.strip():
        raise _config_error(
            f"{ROUTES_VAR} is not set: map request scopes to Slack channels, e.g. {EXAMPLE}"
        )
    return Routes.parse(
        routes_text,
        var=ROUTES_VAR,
        example=EXAMPLE,
        build=lambda value, where: _route(value, where, default_allow),
    )
