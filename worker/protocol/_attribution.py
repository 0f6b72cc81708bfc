"""Who answered, as a person reads it.

A settlement's `by` is the channel's record of who answered, in a form made for
programs (`askq show`, the audit trail, the settlement JSON): `<kind>:<who>`, e.g.
`slack:U0123 (bob)`, `web:carol`, `email:alice@example.com`, `email-link:…` (an email's
signed link), `web-link:slack:U0123` (a link into the web inbox, sent in Slack),
`console:ops`, `auto:policy=recommended`, `timeout` (the ask's default). A page, a mail
or a chat message says it as a sentence instead: "answered in Slack by bob", "answered
by alice@example.com in an email reply", "answered through a link in an email by …".

The words returned are plain text with the person's name in them as given: escape them
for where they go (HTML, mrkdwn, `visible` in a terminal or a mail).
"""

from __future__ import annotations

import re

# "U0123 (bob)": Slack's user id, and the name it had when the answer was recorded.
_SLACK_NAMED = re.compile(r"^(?P<id>\S+) \((?P<name>.+)\)$", re.DOTALL)

# `<kind>` -> where (or how) the answer was given, before " by <who>".
_WHERE = {
    "slack": "in Slack",
    "web": "in the web inbox",
    "email": "in an email reply",
    "console": "in a terminal",
    "email-link": "through a link in an email",
    "web-link": "through a link",
    "link": "through a link",
}


def _who(kind: str, who: str) -> str:
    if kind == "slack":
        named = _SLACK_NAMED.match(who)
        return named.group("name") if named else who
    return who


def answered_by(by: str | None) -> str:
    """`answered …`: how and by whom a request was answered, for a person to read."""
    if not by:
        return "answered"
    if by == "timeout":
        return "answered with the ask's default (nobody answered in time)"
    kind, sep, who = by.partition(":")
    if not sep:  # a bare name (`MemoryAnswerer(by="ops")`): the person or program itself
        return "answered in a terminal" if by == "console" else f"answered by {by}"
    if kind == "auto":
        return f"answered by rules ({who})"
    where = _WHERE.get(kind)
    if where is None:  # a channel of its own: its record is all there is to say
        return f"answered by {by}"
    if kind.endswith("link"):
        source, sep, inner = who.partition(":")
        if sep and source in ("slack", "email", "web"):  # a link sent from another channel
            via = {"slack": "from Slack", "email": "in an email", "web": "from the web inbox"}
            where, kind, who = f"through a link {via[source]}", source, inner
    name = _who(kind, who)
    return f"answered {where} by {name}" if name else f"answered {where}"
