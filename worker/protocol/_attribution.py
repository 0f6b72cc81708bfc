"""Who answered, as a person reads it.

A settlement's `by` is the channel's record of who answered, in a form made for
programs (`askq show`, the audit trail, the settlement JSON): `<kind>:<who>`, e.g.
`slack:U0123 (bob)` (Teams and Discord alike: the platform's user id and the name),
`web:carol`, `email:alice@example.com`, `email-link:…` (an email's signed link),
`web-link:slack:U0123` (a link into the web inbox, sent in Slack),
`console:ops`, `auto:policy=recommended`, `timeout` (the ask's default). A page, a mail
or a chat message says it as a sentence instead: "answered in Slack by bob", "answered
by alice@example.com in an email reply", "answered through a link in an email by …".

The words returned are plain text with the person's name in them as given: escape them
for where they go (HTML, mrkdwn, `visible` in a terminal or a mail).
"""

from __future__ import annotations

import re

# "U0123 (bob)": a chat platform's user id (Slack, Teams, Discord), and the name it had
# when the answer was recorded; the name is what a person reads.
_NAMED = re.compile(r"^(?P<id>\S+) \((?P<name>.+)\)$", re.DOTALL)
_CHATS = frozenset({"slack", "teams", "discord"})  # elsewhere a name is given as is

# `<kind>` -> where (or how) the answer was given, before " by <who>".
_WHERE = {
    "slack": "in Slack",
    "teams": "in Teams",
    "discord": "in Discord",
    "webhook": "through a webhook",
    "web": "in the web inbox",
    "email": "in an email reply",
    "console": "in a terminal",
    "email-link": "through a link in an email",
    "web-link": "through a link",
    "link": "through a link",
}

# A link into askq sent from a channel: `web-link:<source>:<who>`.
_VIA = {
    "slack": "from Slack",
    "teams": "from Teams",
    "discord": "from Discord",
    "email": "in an email",
    "web": "from the web inbox",
}


def _who(kind: str, who: str) -> str:
    named = _NAMED.match(who) if kind in _CHATS else None
    return named.group("name") if named else who


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
        if sep and source in _VIA:  # a link sent from another channel
            where, kind, who = f"through a link {_VIA[source]}", source, inner
    name = _who(kind, who)
    return f"answered {where} by {name}" if name else f"answered {where}"
