"""Answerers are found through the `askq.answerers` entry-point group, so a third
party adds a channel (Teams, Discord...) by declaring one in its own package:

    [project.entry-points."askq.answerers"]
    teams = "askq_teams:TeamsAnswerer"
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from ..protocol._errors import AskError, ErrorCode
from ._answerer import Answerer

GROUP = "askq.answerers"


def answerer_kinds() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=GROUP))


def load_answerer(kind: str) -> type[Answerer[Any]]:
    found = [ep for ep in entry_points(group=GROUP) if ep.name == kind]
    if not found:
        known = ", ".join(answerer_kinds()) or "none installed"
        raise AskError(ErrorCode.CONFIG_ERROR, f"no answerer {kind!r} (known: {known})")
    try:
        cls = found[0].load()
    except ImportError as exc:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"answerer {kind!r} cannot be loaded ({exc}); is its extra installed?"
            f" pip install 'askq[{kind}]'",
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Answerer)):
        raise AskError(ErrorCode.CONFIG_ERROR, f"answerer {kind!r} is not an Answerer subclass")
    return cls
