"""An answerer's hooks (`decide`, `answer_at_once`, `present`, `retract`, `remind`,
`stop`), called with a bound on their time.

A channel is third-party code talking to the outside world; it may raise, hang, or
return something that is not what the hook promises. None of that may hold a question
hostage: the runtime calls each hook through `call_hook`, which gives up after
`ASKQ_HOOK_TIMEOUT` seconds (cancelling the hook) and reports failure instead of
raising, so the runtime can do what the waterfall needs (decline, release, move on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("askq.runtime")


@dataclass(frozen=True)
class HookResult:
    ok: bool  # False: it raised or timed out (already logged)
    value: Any = None


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a hook given up on may still fail; nobody is left to tell


async def call_hook(
    where: str, hook: str, request_id: str, call: Coroutine[Any, Any, Any], timeout: float
) -> HookResult:
    """Run `call` (the coroutine of `hook`) for at most `timeout` seconds. `where` names
    the group, for the log. A hook that ignores its cancellation is left to finish on
    its own; the runtime does not wait for it."""
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    about = f" {request_id}" if request_id else ""
    if not done:
        task.cancel()
        task.add_done_callback(_retrieve)
        log.error("%s: %s%s took longer than %g s; given up on", where, hook, about, timeout)
        return HookResult(ok=False)
    if task.cancelled():
        log.error("%s: %s%s was cancelled", where, hook, about)
        return HookResult(ok=False)
    error = task.exception()
    if error is not None:
        log.error("%s: %s%s failed: %r", where, hook, about, error, exc_info=error)
        return HookResult(ok=False)
    return HookResult(ok=True, value=task.result())
