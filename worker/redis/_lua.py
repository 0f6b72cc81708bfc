"""The Lua scripts as askq loads them: `lua/<name>.lua`, one named state transition
each, its header saying what it uses and what it replies (as bullmq's command headers
do)::

    -- uses: req timers wake group_info tier audit audit_log
    -- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id group
-- args: tier offer
    -- replies: CLAIMED | SETTLED state by code reason | NOT_FOUND | STALE_OFFER | NOT_OFFERED

`uses` names the keys, `args` the arguments, in the order they are sent (a line may
repeat to continue the list). The loader turns them into two tables the script reads,
`K.req`, `A.group`, so a script can only reach a key it declared; `+tiers` after the
names means every tier's stream follows them (a script that may move a request to
another tier), and `+...` after the arguments means more follow (`ARGV_AFTER` is how
many are named). `--@include <name>` pulls in shared helpers (common.lua, request.lua).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

_INCLUDE = re.compile(r"^--@include (\w+)\s*$", re.MULTILINE)
_HEADER = re.compile(r"^-- (uses|args|replies):(.*)$", re.MULTILINE)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# Pieces included by the scripts, not scripts of their own.
INCLUDES = ("common", "request")


@dataclass(frozen=True)
class Script:
    """One script: its text as sent to Redis, and the keys and arguments it declares."""

    name: str
    text: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    tiers: bool  # every tier's stream follows the named keys
    more_keys: bool  # keys follow those (and the tiers), in a layout of its own
    more_args: bool
    replies: tuple[str, ...]


def _raw(name: str) -> str:
    return resources.files(__package__).joinpath(f"lua/{name}.lua").read_text("utf-8")


def names() -> list[str]:
    """Every script in lua/ (the includes are not scripts)."""
    found = resources.files(__package__).joinpath("lua").iterdir()
    return sorted(
        path.name[:-4]
        for path in found
        if path.name.endswith(".lua") and path.name[:-4] not in INCLUDES
    )


def _included(name: str) -> str:
    return _INCLUDE.sub(lambda m: _included(m.group(1)), _raw(name))


def _declared(name: str, text: str, field: str) -> tuple[list[str], list[str]]:
    """The names a header field declares, and its `+...` markers."""
    words = [word for kind, rest in _HEADER.findall(text) if kind == field for word in rest.split()]
    named = [word for word in words if not word.startswith("+")]
    for word in named:
        if not _NAME.fullmatch(word):
            raise ValueError(f"lua/{name}.lua: {field}: {word!r} is not a name")
    if len(set(named)) != len(named):
        raise ValueError(f"lua/{name}.lua: {field}: a name is declared twice")
    return named, [word for word in words if word.startswith("+")]


@cache
def load(name: str) -> Script:
    raw = _raw(name)
    keys, key_markers = _declared(name, raw, "uses")
    args, arg_markers = _declared(name, raw, "args")
    replies = tuple(
        reply.split()[0]
        for kind, rest in _HEADER.findall(raw)
        if kind == "replies"
        for reply in rest.split("|")
        if reply.strip()
    )
    prologue = "\n".join(
        [
            "local K = {" + ", ".join(f"{n} = KEYS[{i}]" for i, n in enumerate(keys, 1)) + "}",
            "local A = {" + ", ".join(f"{n} = ARGV[{i}]" for i, n in enumerate(args, 1)) + "}",
            f"local KEYS_AFTER, ARGV_AFTER = {len(keys)}, {len(args)}",
        ]
    )
    return Script(
        name=name,
        text=prologue + "\n" + _included(name),
        keys=tuple(keys),
        args=tuple(args),
        tiers="+tiers" in key_markers,
        more_keys=any(marker != "+tiers" for marker in key_markers),
        more_args=bool(arg_markers),
        replies=replies,
    )
