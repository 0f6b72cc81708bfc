"""The Lua scripts: every state transition of a request, each one atomic in Redis.

Each `lua/<name>.lua` is one named transition of a request (ask, accept, decline,
release, answer, cancel, fire, abort_turn) or of the registry (register, leave, remove_group);
`--@include <name>` pulls in shared helpers, resolved here once.
redis-py's Script runs EVALSHA and loads the script on NOSCRIPT, so a script's text is
sent once per server, not per call.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_INCLUDE = re.compile(r"^--@include (\w+)\s*$", re.MULTILINE)

NAMES = (
    "ask",
    "accept",
    "decline",
    "release",
    "answer",
    "cancel",
    "fire",
    "abort_turn",
    "forget_caller",
    "register",
    "leave",
    "remove_group",
)


@cache
def source(name: str) -> str:
    text = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text("utf-8")
    return _INCLUDE.sub(lambda m: source(m.group(1)), text)
