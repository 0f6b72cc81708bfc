"""The small types several modules share (as starlette's types.py holds the ASGI ones)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol


class AbortSignal(Protocol):
    """The turn's abort signal: `asyncio.Event` is one."""

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


# What an ask's timeout does: fail TIMED_OUT, or settle with the declared default.
OnTimeout = Literal["fail", "default"]

# Enqueue a channel's retried send: (job name, JSON-able keyword arguments).
Sender = Callable[[str, dict[str, Any]], Awaitable[None]]
