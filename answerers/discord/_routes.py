"""Where a question goes in Discord, and who may answer it there.

`ASKQ_DISCORD_ROUTES` is a JSON object checked in written order, first match wins, `"*"`
(the default) last wherever it is written::

    {"tenant=acme": {"channel": "1234567890123456789",
                     "allow": ["111111111111111111", "role:222222222222222222"]},
     "env=prod": {"user": "333333333333333333"},
     "*": "1234567890123456789"}

A key is a scope selector, as `askq worker --scope` takes it. A value is a target or an
object with one target and an optional `allow` list. A target is a channel id (a text
channel or thread the bot may post in) or `{"user": <user id>}`: the bot's DM with that
person (Discord lets a bot open a DM with anyone who shares a server with it). A bare
string is a channel id. Ids are Discord's snowflakes (17 to 20 digits).

Who may answer: the route's `allow`, else `ASKQ_DISCORD_ALLOWLIST`: user ids, and
`role:<role id>` for everyone holding that role in the server (a DM carries no roles);
on a DM route the user it goes to as well. `"*"` lets anyone who sees the message answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from askq import AskError, ErrorCode, RouteTable

from .._allowlist import ANYONE, Allowlist

ROUTES_VAR = "ASKQ_DISCORD_ROUTES"
ALLOWLIST_VAR = "ASKQ_DISCORD_ALLOWLIST"
ROLE = "role:"

SNOWFLAKE = re.compile(r"^[0-9]{17,20}$")
PERSON_OR_ROLE = re.compile(r"^(?:role:)?[0-9]{17,20}$")
EXAMPLE = '{"tenant=acme": "<channel id>", "*": {"user": "<user id>"}}'
PEOPLE = Allowlist(
    PERSON_OR_ROLE,
    "Discord user ids or role:<role id>",
    "a Discord user id (17-20 digits) or role:<role id>",
)

TargetKind = Literal["channel", "user"]


@dataclass(frozen=True)
class Route:
    kind: TargetKind
    target: str  # a channel id, or the user id of a DM
    allow: frozenset[str]  # user ids, "role:<id>", or "*"

    @property
    def anyone(self) -> bool:
        return ANYONE in self.allow

    def allows(self, user: str | None, roles: Iterable[str] = ()) -> bool:
        if self.anyone:
            return True
        if user is not None and user in self.allow:
            return True
        return any(f"{ROLE}{role}" in self.allow for role in roles)

    def describe(self) -> str:
        return f"the DM of user {self.target}" if self.kind == "user" else f"channel {self.target}"


Routes = RouteTable[Route]


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def _target(value: dict[str, Any], where: str) -> tuple[TargetKind, str]:
    given = [name for name in ("channel", "user") if name in value]
    if len(given) != 1:
        raise _config_error(
            f'{where}: give one of "channel" (a channel id) or "user" (a user id, for a DM)'
        )
    kind: TargetKind = "channel" if given[0] == "channel" else "user"
    target = value[kind]
    if not (isinstance(target, str) and SNOWFLAKE.match(target)):
        what = "channel id" if kind == "channel" else "user id"
        raise _config_error(
            f"{where}.{kind}: {target!r} is not a Discord {what} (17-20 digits; copy it with"
            " Developer Mode on)"
        )
    return kind, target


def _route(value: Any, where: str, default_allow: frozenset[str] | None) -> Route:
    if isinstance(value, str):
        value = {"channel": value}
    if not isinstance(value, dict):
        raise _config_error(f'{where}: expected a channel id or {{"channel": ..., "allow": [...]}}')
    unknown = set(value) - {"channel", "user", "allow"}
    if unknown:
        raise _config_error(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    kind, target = _target(value, where)
    if "allow" in value:
        allow = PEOPLE.parse(value["allow"], f"{where}.allow")
    else:
        allow = default_allow or frozenset()
    if kind == "user":
        allow |= {target}  # a DM: the one person who sees it may answer it
    if not allow:
        raise _config_error(
            f'{where}: nobody may answer in {target}; give "allow": [user ids or role:<id>] or'
            f' set {ALLOWLIST_VAR} (or "{ANYONE}" for anyone who sees the message)'
        )
    return Route(kind=kind, target=target, allow=frozenset(allow))


def parse_routes(routes_text: str, allowlist_text: str) -> Routes:
    """Read the two settings; every problem is a CONFIG_ERROR naming the variable."""
    default_allow: frozenset[str] | None = None
    if allowlist_text.strip():
        default_allow = PEOPLE.parse_setting(allowlist_text, ALLOWLIST_VAR)
    if not routes_text.strip():
        raise _config_error(
            f"{ROUTES_VAR} is not set: map request scopes to Discord channels, e.g. {EXAMPLE}"
        )
    return Routes.parse(
        routes_text,
        var=ROUTES_VAR,
        example=EXAMPLE,
        build=lambda value, where: _route(value, where, default_allow),
    )
