"""An answerer's hooks (`decide`, `answer_at_once`, `present`, `retract`, `remind`,
`stop`), called with a bound on their time.

A channel is third-party code talking to the outside world; it may raise, hang, or
return something that is not what the hook promises. None of that may hold a question
hostage: the runtime calls each hook through `call_hook`, which gives up after
`ASKQ_HOOK_TIMEOUT` seconds (cancelling the hook) and reports failure instead of
raising, so the runtime can do what the waterfall needs (decline, release, move on).

Cost: most hooks finish without waiting on anything (a rules engine deciding, a
console queueing). `call_hook` runs the hook inline up to its first wait, so those
cost a function call; only a hook that does wait is handed to a task of its own
(about 25 µs) that a timer can give up on even if the hook ignores its cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Coroutine, Generator
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


@types.coroutine
def _go_on(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Go on running `coro`, which ran inline up to yielding `waiting_on` (what it
    awaits): what `yield from coro` would do from that point, so a task can run it."""
    while True:
        try:
            try:
                sent = yield waiting_on
            except GeneratorExit:  # closed (its loop is gone): close the hook with it
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in (a cancel): the hook's
                waiting_on = coro.throw(exc)
            else:
                waiting_on = coro.send(sent)
        except StopIteration as stop:
            return stop.value


async def call_hook(
    where: str, hook: str, request_id: str, call: Coroutine[Any, Any, Any], timeout: float
) -> HookResult:
    """Run `call` (the coroutine of `hook`) for at most `timeout` seconds. `where` names
    the group, for the log. A hook that ignores its cancellation is left to finish on
    its own; the runtime does not wait for it."""
    about = f" {request_id}" if request_id else ""
    try:
        waiting_on = call.send(None)
    except StopIteration as stop:  # done without waiting
        return HookResult(ok=True, value=stop.value)
    except (Exception, asyncio.CancelledError) as error:  # a cancel it raised itself, too
        log.error("%s: %s%s failed: %r", where, hook, about, error, exc_info=error)
        return HookResult(ok=False)
    task = asyncio.ensure_future(_go_on(call, waiting_on))
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_retrieve)
        log.error("%s: %s%s took longer than %g s; given up on", where, hook, about, timeout)
        return HookResult(ok=False)
    if task.cancelled():
        log.error("%s: %s%s was cancelled", where, hook, about)
        return HookResult(ok=False)
    failure = task.exception()
    if failure is not None:
        log.error("%s: %s%s failed: %r", where, hook, about, failure, exc_info=failure)
        return HookResult(ok=False)
    return HookResult(ok=True, value=task.result())
