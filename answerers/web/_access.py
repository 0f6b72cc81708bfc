"""Who may see and answer which questions in the web inbox.

`ASKQ_WEB_ROUTES` is a JSON object checked in written order, first match wins, `"*"`
(the default) last wherever it is written, as the Slack answerer's routes are::

    {"tenant=acme": ["alice", "bob"], "tenant=beta-*,env=prod": ["oncall"], "*": "*"}

A key is a scope selector (`key=pattern` pairs joined by commas, shell-style patterns);
a value is the users who may answer there (a JSON list or a comma-separated string),
`"*"` meaning every signed-in user. The group accepts a request when a route matches
its scope, and declines it (the waterfall moves on) when none does. Unset, the one
route is `"*"` with `ASKQ_WEB_ALLOWLIST` (default: every signed-in user).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from askq import AskError, ErrorCode, RouteTable

from .._allowlist import ANYONE, Allowlist

ROUTES_VAR = "ASKQ_WEB_ROUTES"
ALLOWLIST_VAR = "ASKQ_WEB_ALLOWLIST"
# A user name: what a token signs in as, or what the proxy's header says (an email).
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,199}$")
USERS = Allowlist(USER_NAME, "user names", "a user name")


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


@dataclass(frozen=True)
class AccessRoute:
    allow: frozenset[str]

    def allows(self, user: str) -> bool:
        return ANYONE in self.allow or user in self.allow


class Access(RouteTable[AccessRoute]):
    def allows(self, user: str, scope: dict[str, str]) -> bool:
        route = self.match(scope)
        return route is not None and route.allows(user)


def parse_access(routes_text: str, allowlist_text: str) -> Access:
    """Read the two settings; every problem is a CONFIG_ERROR naming the variable."""
    default_allow = USERS.parse_setting(allowlist_text.strip() or ANYONE, ALLOWLIST_VAR)
    if not routes_text.strip():
        return Access((({}, AccessRoute(default_allow)),))

    def route(value: Any, where: str) -> AccessRoute:
        allow = default_allow if value is None else USERS.parse(value, where)
        if not allow:
            raise _config_error(f"{where}: nobody may answer there")
        return AccessRoute(allow)

    return Access.parse(routes_text, var=ROUTES_VAR, example='{"*": "*"}', build=route)
