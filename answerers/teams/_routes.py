"""Where a question goes in Microsoft Teams, and who may answer it there.

`ASKQ_TEAMS_ROUTES` is a JSON object checked in written order, first match wins, `"*"`
(the default) last wherever it is written::

    {"tenant=acme": {"conversation": "19:abc...@thread.tacv2",
                     "allow": ["6f1c...-aad-object-id", "alice@contoso.com"]},
     "env=prod": {"user": "0b7e...-aad-object-id"},
     "*": "19:def...@thread.tacv2"}

A key is a scope selector, as `askq worker --scope` takes it. A value is a target or an
object with one target and an optional `allow` list. A target is a conversation id (a
Teams channel, `19:...@thread.tacv2`; a group chat, `19:...@thread.v2`) where the app is
installed, or `{"user": <Azure AD object id>}` for the app's personal chat with that
person (the app installed for them: Teams does not let a bot open a chat by e-mail or
UPN). A bare string is a conversation id, or a user when it is an object id.

Who may answer: the route's `allow`, else `ASKQ_TEAMS_ALLOWLIST` (Azure AD object ids or
user principal names, compared without regard to case); on a personal route the user it
goes to as well. `"*"` lets anyone who sees the card answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from askq import AskError, ErrorCode, RouteTable

from .._allowlist import ANYONE, Allowlist

ROUTES_VAR = "ASKQ_TEAMS_ROUTES"
ALLOWLIST_VAR = "ASKQ_TEAMS_ALLOWLIST"

GUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
UPN = re.compile(r"^[^@\s\"<>,;]+@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})\.[A-Za-z]{2,63}$")
# A conversation's id: `19:` (channels, group chats, meetings) or `a:` (personal chats);
# never a thread's (`;messageid=`): a question starts a thread of its own.
CONVERSATION = re.compile(r"^(?:19|a):[^\s;]{1,500}$")
PERSON = re.compile(f"{GUID.pattern}|{UPN.pattern}")
EXAMPLE = '{"tenant=acme": "19:abc@thread.tacv2", "*": {"user": "<Azure AD object id>"}}'
PEOPLE = Allowlist(
    PERSON,
    "Azure AD object ids or user principal names",
    "an Azure AD object id (a GUID) or a user principal name (name@domain)",
)

TargetKind = Literal["conversation", "user"]


@dataclass(frozen=True)
class Route:
    kind: TargetKind
    target: str  # a conversation id, or the Azure AD object id of a personal chat's user
    allow: frozenset[str]  # lower-case object ids and UPNs, or "*"

    @property
    def anyone(self) -> bool:
        return ANYONE in self.allow

    @property
    def needs_upn(self) -> bool:
        """Whether the list names someone by UPN (which an activity does not carry)."""
        return any("@" in name for name in self.allow)

    def allows(self, object_id: str | None, upn: str | None = None) -> bool:
        if self.anyone:
            return True
        return bool(
            (object_id and object_id.lower() in self.allow) or (upn and upn.lower() in self.allow)
        )

    def describe(self) -> str:
        return f"the personal chat of {self.target}" if self.kind == "user" else self.target


Routes = RouteTable[Route]


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def _target(value: dict[str, Any], where: str) -> tuple[TargetKind, str]:
    given = [name for name in ("conversation", "user") if name in value]
    if len(given) != 1:
        raise _config_error(
            f'{where}: give one of "conversation" (a conversation id, 19:...) or "user"'
            " (an Azure AD object id)"
        )
    kind: TargetKind = "conversation" if given[0] == "conversation" else "user"
    target = value[kind]
    if kind == "conversation" and not (isinstance(target, str) and CONVERSATION.match(target)):
        raise _config_error(
            f"{where}.conversation: {target!r} is not a Teams conversation id"
            " (19:...@thread.tacv2 for a channel, 19:...@thread.v2 for a group chat)"
        )
    if kind == "user" and not (isinstance(target, str) and GUID.match(target)):
        raise _config_error(
            f"{where}.user: {target!r} is not an Azure AD object id (a GUID); Teams does not"
            " let a bot start a chat by e-mail or UPN"
        )
    return kind, target.lower() if kind == "user" else target


def _route(value: Any, where: str, default_allow: frozenset[str] | None) -> Route:
    if isinstance(value, str):
        value = {"user": value} if GUID.match(value) else {"conversation": value}
    if not isinstance(value, dict):
        raise _config_error(
            f'{where}: expected a conversation id or {{"conversation": ..., "allow": [...]}}'
        )
    unknown = set(value) - {"conversation", "user", "allow"}
    if unknown:
        raise _config_error(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    kind, target = _target(value, where)
    if "allow" in value:
        allow = PEOPLE.parse(value["allow"], f"{where}.allow")
    else:
        allow = default_allow or frozenset()
    allow = frozenset(name.lower() for name in allow)
    if kind == "user":
        allow |= {target}  # a personal chat: the one person who sees it may answer it
    if not allow:
        raise _config_error(
            f'{where}: nobody may answer in {target}; give "allow": [object ids or UPNs] or'
            f' set {ALLOWLIST_VAR} (or "{ANYONE}" for anyone who sees the card)'
        )
    return Route(kind=kind, target=target, allow=allow)


def parse_routes(routes_text: str, allowlist_text: str) -> Routes:
    """Read the two settings; every problem is a CONFIG_ERROR naming the variable."""
    default_allow: frozenset[str] | None = None
    if allowlist_text.strip():
        default_allow = PEOPLE.parse_setting(allowlist_text, ALLOWLIST_VAR)
    if not routes_text.strip():
        raise _config_error(
            f"{ROUTES_VAR} is not set: map request scopes to Teams conversations, e.g. {EXAMPLE}"
        )
    return Routes.parse(
        routes_text,
        var=ROUTES_VAR,
        example=EXAMPLE,
        build=lambda value, where: _route(value, where, default_allow),
    )
