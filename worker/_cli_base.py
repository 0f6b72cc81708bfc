"""What every `askq` command shares: a failure is one `CODE: message` line and the
code's exit status, never a traceback; log lines show agent text escaped."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from redis.exceptions import RedisError

from ._errors import AskError, ErrorCode
from ._text import visible

T = TypeVar("T")


def fail(exc: AskError) -> None:
    click.echo(visible(f"{exc.code.value}: {exc.message}", multiline=True), err=True)
    sys.exit(exc.exit_status)


class _VisibleFormatter(logging.Formatter):
    """Log lines as a terminal should show them: agent text in a message (a label in a
    refused answer, a header) cannot move the cursor or retitle the window."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record), multiline=True)


def log_to_stderr() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_VisibleFormatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    if not root.handlers:  # an embedding program's own logging wins
        root.addHandler(handler)
        root.setLevel(os.environ.get("ASKQ_LOG_LEVEL", "WARNING").upper())


class CliGroup(click.Group):
    """The command group: whatever escapes a command (a bug) is one `INTERNAL:` line
    and exit status 1, not a traceback; `ASKQ_DEBUG=1` shows the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:  # `askq status | head`: the reader left; so do we, quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
        except Exception as exc:
            if os.environ.get("ASKQ_DEBUG"):
                raise
            fail(
                AskError(
                    ErrorCode.INTERNAL,
                    f"unexpected {type(exc).__name__}: {exc} (ASKQ_DEBUG=1 shows the traceback)",
                )
            )


def run_cli(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; AskErrors become `CODE: message` and their exit status."""
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except AskError as exc:
        fail(exc)
    except RedisError as exc:  # a reply askq did not expect (e.g. a script error)
        fail(AskError(ErrorCode.INTERNAL, f"unexpected Redis reply: {exc}"))
    raise AssertionError("unreachable")


def parse_scope_flags(pairs: tuple[str, ...]) -> dict[str, str]:
    scope = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected key=value", param_hint="--scope")
        scope[key] = value
    return scope
