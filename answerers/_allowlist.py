"""Who may answer in a channel that names its answerers (Slack user ids, web user
names): a JSON list of names, or a comma-separated string (the env-var shorthand),
`"*"` meaning anyone who sees the question. Read from a route's `allow` and from the
channel's allowlist variable (`ASKQ_SLACK_ALLOWLIST`, `ASKQ_WEB_ALLOWLIST`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from askq import AskError, ErrorCode

ANYONE = "*"


@dataclass(frozen=True)
class Allowlist:
    name: re.Pattern[str]  # what one name looks like
    names: str  # "Slack user ids": what the list holds, in "expected a list of ..."
    a_name: str  # "a Slack user id (U... or W...)": what an item is not, when refused

    def parse(self, raw: Any, where: str) -> frozenset[str]:
        """A JSON list or the comma-separated shorthand; a CONFIG_ERROR naming `where`."""
        if isinstance(raw, str):
            items: list[Any] = [part.strip() for part in raw.split(",") if part.strip()]
        elif isinstance(raw, list):
            items = raw
        else:
            raise _config_error(f"{where}: expected a list of {self.names}")
        for item in items:
            if not isinstance(item, str) or not (item == ANYONE or self.name.match(item)):
                raise _config_error(f'{where}: {item!r} is not {self.a_name} or "{ANYONE}"')
        return frozenset(items)

    def parse_setting(self, text: str, var: str) -> frozenset[str]:
        """The variable `var`'s (set) text: JSON when it starts with "[", else the shorthand."""
        text = text.strip()
        raw: Any = text
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except ValueError as exc:
                raise _config_error(f"{var}: not valid JSON ({exc})") from None
        return self.parse(raw, var)


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)
