"""The event loop an `askq` command runs on: uvloop's when it is installed (the
'uvloop' extra), else asyncio's, as uvicorn's `--loop auto` chooses;
`ASKQ_EVENT_LOOP=asyncio` or `uvloop` picks one. Measured in docs/benchmarks.md
("Speed, issue 16"): the same asks cost 10-25 % less CPU on uvloop, and a worker
executes 14 % fewer instructions per offer. askq itself is loop-agnostic, so a program
that embeds it runs on whichever loop it chose."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..protocol._errors import AskError, ErrorCode

T = TypeVar("T")


def run_on_loop(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, on uvloop when the setting asks for it. (Read here from
    the environment, not through `Settings`, so that a malformed other setting is still
    reported by the command itself, in its own words.)"""
    choice = os.environ.get("ASKQ_EVENT_LOOP", "auto").strip().lower() or "auto"
    if choice == "asyncio":
        return asyncio.run(main)
    if choice not in ("auto", "uvloop"):
        main.close()
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            "settings: ASKQ_EVENT_LOOP: Input should be 'auto', 'asyncio' or 'uvloop'",
        )
    if not _standard_fds_open():
        # libuv aborts the process (SIGABRT, an assertion in uv__close) once a closed
        # fd 0-2 has been reused by a socket of its own: on asyncio the command runs
        # and says what is wrong itself (the console refuses a closed stdin).
        return asyncio.run(main)
    try:
        import uvloop
    except ImportError:
        if choice == "auto":
            return asyncio.run(main)
        main.close()
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            "settings: ASKQ_EVENT_LOOP=uvloop needs uvloop: pip install 'askq[uvloop]'",
        ) from None
    return uvloop.run(main)


def _standard_fds_open() -> bool:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return False
    return True
