"""What every `askq` command shares: a failure is one `CODE: message` line and the
code's exit status, never a traceback; log lines show agent text escaped; the global
options (`--redis-url`, `--prefix`, `-v`, `--log-format`) work before the command
and after it (`askq status --prefix x` as well as `askq --prefix x status`); a text
argument that is not UTF-8 (Python decodes such bytes of argv to lone surrogates) is
`INVALID_REQUEST` naming the argument, before the command runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from redis.exceptions import RedisError

from ..observing._logging import LOG_FORMATS
from ..observing._logging import configure as configure_log
from ..protocol._errors import AskError, ErrorCode
from ..protocol._settings import Settings, settings_error
from ..protocol._text import utf8_problem, visible
from ..redis._connections import check_redis_url
from ._loop import run_on_loop

T = TypeVar("T")


def fail(exc: AskError) -> None:
    click.echo(visible(f"{exc.code.value}: {exc.message}", multiline=True), err=True)
    sys.exit(exc.exit_status)


def configure_logging(given: dict[str, Any]) -> None:
    configure_log(given.get("verbose", 0), given.get("log_format") or "text")


# --- global options ------------------------------------------------------------------

_GLOBALS = "askq.globals"  # ctx.meta key: what the global options were given, so far
# Commands that have options of these names of their own (`askq demo --redis-url`).
_OWN_GLOBALS = {"demo"}


def _given(ctx: click.Context) -> dict[str, Any]:
    given: dict[str, Any] = ctx.meta.setdefault(_GLOBALS, {})
    return given


def settings_for(given: dict[str, Any]) -> Settings:
    """The settings with the global options' overrides; a bad value is one
    CONFIG_ERROR naming it (a malformed Redis URL included), never a traceback."""
    overrides = {k: given[k] for k in ("redis_url", "prefix") if given.get(k)}
    try:
        settings = Settings(**overrides)
        check_redis_url(settings.redis_url)
    except ValidationError as exc:
        fail(settings_error(exc))
        raise AssertionError("unreachable") from None
    except AskError as exc:
        fail(AskError(exc.code, f"--redis-url / ASKQ_REDIS_URL: {exc.message}"))
        raise AssertionError("unreachable") from None
    return settings


def _apply_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None or value == 0 or param.name is None:
        return  # not given here (the other side of the command may have it)
    if isinstance(value, str) and (why := utf8_problem(value)) is not None:
        fail(AskError(ErrorCode.CONFIG_ERROR, f"{param.opts[0]}: {why}"))
    given = _given(ctx)
    given[param.name] = value
    if param.name in ("verbose", "log_format"):
        configure_logging(given)
    else:
        ctx.obj = settings_for(given)


def global_options() -> list[click.Option]:
    """The options every command takes, before or after its name (new objects each
    time: a click parameter belongs to one command)."""
    return [
        click.Option(
            ["--redis-url"],
            default=None,
            expose_value=False,
            callback=_apply_global,
            help="Redis URL (ASKQ_REDIS_URL; default redis://localhost:6379/0).",
        ),
        click.Option(
            ["--prefix"],
            default=None,
            expose_value=False,
            callback=_apply_global,
            help="Key prefix (ASKQ_PREFIX; default askq).",
        ),
        click.Option(
            ["-v", "--verbose"],
            count=True,
            expose_value=False,
            callback=_apply_global,
            help="Log more: -v each decision, settlement and timer fired; -vv debug.",
        ),
        click.Option(
            ["--log-format"],
            type=click.Choice(LOG_FORMATS),
            default=None,
            expose_value=False,
            callback=_apply_global,
            help="Log lines as text (default) or one JSON object each.",
        ),
    ]


class CheckedContext(click.Context):
    """A command's context that checks its text arguments and options before the
    command runs: each string is valid UTF-8 text, else INVALID_REQUEST naming it
    (`TURN: not UTF-8 text (byte 0xff at character 0)`; CONFIG_ERROR for a command
    whose options are settings, with `text_error_code`: `askq worker KIND`). Paths
    and files are left alone (a file name need not be UTF-8); what a value must be
    beyond that, the API it is passed to checks (`_checks.py`)."""

    def invoke(self, callback: Any, /, *args: Any, **kwargs: Any) -> Any:
        if self.command is not None and callback is self.command.callback:
            _check_text_params(self)
        return super().invoke(callback, *args, **kwargs)


def _check_text_params(ctx: click.Context) -> None:
    for param in ctx.command.params:
        if not isinstance(param.type, (click.types.StringParamType, click.Choice)):
            continue
        value = ctx.params.get(param.name or "")
        for text in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(text, str) and (why := utf8_problem(text)) is not None:
                name = (
                    param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
                )
                code = getattr(ctx.command, "text_error_code", ErrorCode.INVALID_REQUEST)
                fail(AskError(code, f"{name}: {why}"))


def add_global_options(command: click.Command) -> click.Command:
    """Give a command (and every command of a group) the global options, unless it
    has options of those names of its own, and a context that checks its text
    arguments (`CheckedContext`). Idempotent."""
    command.context_class = CheckedContext
    if getattr(command, "_askq_globals", False) or command.name in _OWN_GLOBALS:
        return command
    taken = {opt for p in command.params for opt in p.opts + p.secondary_opts}
    for option in global_options():
        if not taken.intersection(option.opts):
            command.params.append(option)
    command._askq_globals = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)
    return command


class CliGroup(click.Group):
    """The command group: whatever escapes a command (a bug) is one `INTERNAL:` line
    and exit status 1, not a traceback; `ASKQ_DEBUG=1` shows the traceback. Every
    command it resolves takes the global options after its name too."""

    context_class = CheckedContext

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        return add_global_options(command) if command is not None else None

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
        return run_on_loop(main())  # type: ignore[arg-type]
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
