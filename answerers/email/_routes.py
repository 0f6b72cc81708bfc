"""Who gets a question by email, and who may answer it.

`ASKQ_EMAIL_ROUTES` is a JSON object checked in written order, first match wins, `"*"`
(the default) last wherever it is written::

    {"tenant=acme": {"to": ["alice@acme.example", "bob@acme.example"],
                     "allow": ["@acme.example"]},
     "env=prod": "oncall@example.com",
     "*": ["ops@example.com"]}

A key is a scope selector (`key=pattern` pairs joined by commas, the shell-style
patterns of `askq worker --scope`); a scope no route matches is declined. A value is
an address, a list of addresses, or an object with `to` and an optional `allow`: the
senders whose replies count (addresses, or `@domain` for a whole domain). Without
`allow`, the route's recipients may answer, and nobody else.

`allow` narrows, it does not widen: a reply's MAC binds it to the recipient its
address was sent to, so a reply counts when it comes from that recipient and the
route allows them. (Route to people rather than to a list address.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from askq import AskError, ErrorCode, RouteTable

ROUTES_VAR = "ASKQ_EMAIL_ROUTES"
ANYONE = "*"
EXAMPLE = '{"tenant=acme": "alice@acme.example", "*": "ops@example.com"}'
MAX_RECIPIENTS = 50

# Deliberately narrow: what a route names is written by an operator, and a strict
# shape keeps display names, comments and header tricks out of envelope addresses.
ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")
DOMAIN = re.compile(r"^@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")


def normal(address: str) -> str:
    """How addresses are compared: case-insensitively (a local part's case is the
    receiving server's business in theory; in practice nobody relies on it)."""
    return address.strip().lower()


@dataclass(frozen=True)
class Route:
    to: tuple[str, ...]  # normalized recipient addresses
    allow: frozenset[str]  # normalized addresses and @domains

    def allows(self, sender: str) -> bool:
        sender = normal(sender)
        domain = "@" + sender.rpartition("@")[2]
        return sender in self.allow or domain in self.allow


Routes = RouteTable[Route]


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def _addresses(raw: Any, where: str, *, domains: bool) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise _config_error(f"{where}: expected an address or a non-empty list of addresses")
    out: list[str] = []
    for item in items:
        ok = isinstance(item, str) and (
            ADDRESS.match(item) or (domains and DOMAIN.match(item)) or (domains and item == ANYONE)
        )
        if not ok:
            what = "an address or @domain" if domains else "an email address"
            raise _config_error(f"{where}: {item!r} is not {what}")
        if normal(item) not in out:
            out.append(normal(item))
    if len(out) > MAX_RECIPIENTS:
        raise _config_error(f"{where}: at most {MAX_RECIPIENTS} addresses")
    return tuple(out)


def _route(value: Any, where: str) -> Route:
    if isinstance(value, str | list):
        value = {"to": value}
    if not isinstance(value, dict):
        raise _config_error(f'{where}: expected an address, a list, or {{"to": ..., "allow": ...}}')
    unknown = set(value) - {"to", "allow"}
    if unknown:
        raise _config_error(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    to = _addresses(value.get("to"), f"{where}.to", domains=False)
    if "allow" in value:
        allow = frozenset(_addresses(value["allow"], f"{where}.allow", domains=True))
        if ANYONE in allow:
            raise _config_error(
                f"{where}.allow: anyone may not answer by email; name addresses or @domains"
            )
    else:
        allow = frozenset(to)
    return Route(to=to, allow=allow)


def parse_routes(text: str) -> Routes:
    """Read ASKQ_EMAIL_ROUTES; every problem is a CONFIG_ERROR naming the route."""
    if not text.strip():
        raise _config_error(
            f"{ROUTES_VAR} is not set: map request scopes to addresses, e.g. {EXAMPLE}"
        )
    return Routes.parse(text, var=ROUTES_VAR, example=EXAMPLE, build=_route)
