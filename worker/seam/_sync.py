"""A blocking wrapper for agents that are not async.

One background thread runs an event loop and one `Seam`; every call is submitted to
it, so many threads may ask at once and still share the seam's few connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from ..protocol._actions import ToolAction
from ..protocol._models import Answers, Caller
from ..protocol._settings import Settings
from ._approvals import Decision, approve
from ._seam import Seam
from ._tool import AskUserQuestionTool, ToolResult

T = TypeVar("T")


class SyncSeam:
    """The seam for synchronous code::

    with SyncSeam("redis://localhost:6379/0") as seam:
        answers = seam.ask(questions, Caller(agent_id="a1", turn_id="t1"))
    """

    def __init__(self, url: str | None = None, **overrides: Any) -> None:
        if url:
            overrides["redis_url"] = url
        settings = Settings(**overrides)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="askq-sync", daemon=True
        )
        self._thread.start()
        self.seam: Seam = self._call(self._open(settings))

    @staticmethod
    async def _open(settings: Settings) -> Seam:
        return await Seam(settings=settings).__aenter__()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def ask(
        self,
        questions: Any,
        caller: Caller,
        *,
        scope: Mapping[str, str] | None = None,
        signal: threading.Event | None = None,
        **options: Any,
    ) -> Answers:
        """Block until answered; `signal` is the turn's abort signal (set it to cancel).
        `options`: timeout, on_timeout, default, idempotency_key (see `Seam.ask`)."""
        with self._bridge(signal) as event:
            return self._call(
                self.seam.ask(questions, caller, scope=scope, signal=event, **options)
            )

    def execute(
        self,
        args: Any,
        caller: Caller,
        signal: threading.Event | None = None,
        *,
        scope: Mapping[str, str] | None = None,
        **options: Any,
    ) -> ToolResult:
        """The `ask_user_question` tool call, blocking. `options`: tool_call_id, run_id,
        idempotency_key, timeout, on_timeout, default (see `AskUserQuestionTool.execute`)."""
        tool = AskUserQuestionTool(self.seam, scope=scope)
        with self._bridge(signal) as event:
            return self._call(tool.execute(args, caller, event, **options))

    def approve(
        self,
        action: ToolAction | Mapping[str, Any],
        caller: Caller,
        *,
        signal: threading.Event | None = None,
        **options: Any,
    ) -> Decision:
        """`askq.approve`, blocking. `options`: scope, timeout, on_timeout,
        idempotency_key, tool_call_id, run_id (see `askq.approve`)."""
        with self._bridge(signal) as event:
            decided = approve(action, seam=self.seam, caller=caller, signal=event, **options)
            return self._call(decided)

    def abort_turn(self, turn_id: str) -> int:
        return self._call(self.seam.abort_turn(turn_id))

    @contextlib.contextmanager
    def _bridge(self, signal: threading.Event | None) -> Iterator[asyncio.Event | None]:
        """Mirror a threading.Event into an asyncio.Event on the seam's loop."""
        if signal is None:
            yield None
            return
        event: asyncio.Event = self._call(_new_event())
        finished = threading.Event()

        def watch() -> None:
            # Wakes at most once a second after the ask ends, so the thread exits.
            while not finished.is_set():
                if signal.wait(1.0):
                    self._loop.call_soon_threadsafe(event.set)
                    return

        if signal.is_set():
            self._loop.call_soon_threadsafe(event.set)
        else:
            threading.Thread(target=watch, name="askq-signal", daemon=True).start()
        try:
            yield event
        finally:
            finished.set()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self.seam.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> SyncSeam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _new_event() -> asyncio.Event:
    return asyncio.Event()
