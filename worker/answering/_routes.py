"""A channel's scope routes: the JSON object from scope selector to route that Slack,
email and web each read from one setting (`ASKQ_SLACK_ROUTES`, ...).

    {"tenant=acme": ..., "tenant=beta-*,env=prod": ..., "*": ...}

Checked in written order, first match wins, `"*"` (the default) last wherever it is
written; a scope no route matches is declined. A key is a selector as `parse_selector`
reads it. What a value means is the channel's: it passes `build`, which makes its route
from a value and raises its own CONFIG_ERRORs, named by `where` (`ASKQ_X_ROUTES['key']`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import parse_selector, scope_matches

R = TypeVar("R")
DEFAULT = "*"


@dataclass(frozen=True)
class RouteTable(Generic[R]):
    routes: tuple[tuple[dict[str, str], R], ...]  # (selector, route), in the order checked

    def match(self, scope: dict[str, str]) -> R | None:
        """The first route whose selector matches the scope; None: decline."""
        return next((route for sel, route in self.routes if scope_matches(sel, scope)), None)

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        var: str,
        example: str,
        build: Callable[[Any, str], R],
    ) -> Self:
        """Read the setting `var` (set: the caller decides what unset means); every
        problem is a CONFIG_ERROR naming it, the table's with `example` beside it."""
        try:
            table = json.loads(text)
        except ValueError as exc:
            raise _config_error(f"{var}: not valid JSON ({exc}); e.g. {example}") from None
        if not isinstance(table, dict) or not table:
            raise _config_error(f"{var}: expected a non-empty JSON object, e.g. {example}")
        keys = [key for key in table if key != DEFAULT]
        if DEFAULT in table:  # the default goes last, wherever it was written
            keys.append(DEFAULT)
        routes = []
        for key in keys:
            where = f"{var}[{key!r}]"
            route = build(table[key], where)  # the value's errors first, as the channels did
            routes.append((parse_selector(key, where), route))
        return cls(tuple(routes))


def _config_error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)
