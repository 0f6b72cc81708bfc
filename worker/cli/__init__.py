"""`askq`: ask from the shell, run answerer workers, abort turns, see status, demo.

Failures print `CODE: message` on stderr and exit with the code's status (README,
"Error codes"); an unreachable Redis is one line naming the URL (its password
redacted), never a traceback. Even a bug is one `INTERNAL:` line (`ASKQ_DEBUG=1`
shows its traceback). Agent text printed here, in tables and in log lines, has its
control characters shown escaped.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

import click

from ..answering._plugins import answerer_kinds, load_answerer
from ..answering._runtime import run_until_stopped, stop_on_signals
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import Caller, validate_model
from ..protocol._settings import Settings
from ..protocol._text import visible
from ..protocol._tracing import configure_from_environment as configure_tracing
from ..protocol._tracing import environment_context, flush_traces
from ..redis._connections import redis_errors
from ..redis._wire import redacted
from ..seam._seam import Seam
from ._admin import group, status
from ._ask import (
    check_default,
    fail_with_hint,
    is_terminal,
    no_answerer_hint,
    timeout_default_notice,
    waiting_line,
)
from ._base import (
    CliGroup,
    configure_logging,
    fail,
    global_options,
    parse_scope_flags,
    run_cli,
    settings_for,
)
from ._health import health
from ._inspect import audit, requests, show
from ._worker import worker


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="askq", prog_name="askq", message="%(prog)s %(version)s")
@click.pass_context
def main(ctx: click.Context) -> None:
    """askq: let AI agents stop and ask a human, over Redis.

    Global options (--redis-url, --prefix, -v, --log-format) go before or after the
    command. Shell completion: eval "$(_ASKQ_COMPLETE=bash_source askq)" (zsh_source,
    fish_source for those shells)."""
    given = ctx.meta.setdefault("askq.globals", {})
    configure_logging(given)
    try:  # traces: the standard OTEL_* variables (README, "Metrics and traces")
        configure_tracing()
    except AskError as exc:
        fail(exc)
    if ctx.invoked_subcommand != "demo":  # the demo ignores ASKQ_REDIS_URL
        ctx.obj = settings_for(given)


for _option in global_options():
    main.params.append(_option)


def _question_from_flags(
    question: str, options: tuple[str, ...], header: str, multi: bool, qid: str
) -> dict[str, Any]:
    opts = []
    for raw in options:
        label, _, description = raw.partition("|")
        opts.append({"label": label.strip(), "description": description.strip()})
    return {
        "questions": [
            {
                "id": qid,
                "question": question,
                "header": header,
                "options": opts,
                "multiSelect": multi,
            }
        ]
    }


@main.command()
@click.argument("file", required=False, type=click.File("rb"))
@click.option("--question", "-q", help="Ask one question given by flags instead of JSON.")
@click.option("--option", "-o", "options", multiple=True, help="'Label' or 'Label|description'.")
@click.option("--header", default="Question", show_default=True)
@click.option("--multi", is_flag=True, help="Multi-select.")
@click.option("--id", "qid", default="q1", show_default=True, help="Question id.")
@click.option("--agent", default=None, help="Calling agent id (default: cli-<random>).")
@click.option("--owner", default=None, help="The agent that owns the caller, if any.")
@click.option("--turn", default=None, help="Turn id (default: a new one).")
@click.option("--scope", "scope", multiple=True, help="Routing label key=value (repeatable).")
@click.option("--timeout", type=float, default=None, help="Seconds to wait (default: no timeout).")
@click.option(
    "--on-timeout",
    type=click.Choice(["fail", "default"]),
    default="fail",
    show_default=True,
    help="fail: exit TIMED_OUT. default: answer with --default (or each question's"
    " recommended option), marked defaulted.",
)
@click.option(
    "--default", "default_json", default=None, help="Default answers JSON for --on-timeout default."
)
@click.option(
    "--idempotency-key",
    default=None,
    help="Asking again with this key waits on the same request, or prints its stored answer.",
)
@click.pass_obj
def ask(
    settings: Settings,
    file: Any,
    question: str | None,
    options: tuple[str, ...],
    header: str,
    multi: bool,
    qid: str,
    agent: str | None,
    owner: str | None,
    turn: str | None,
    scope: tuple[str, ...],
    timeout: float | None,
    on_timeout: Any,
    default_json: str | None,
    idempotency_key: str | None,
) -> None:
    """Ask and wait; print the answers JSON. Input: FILE, '-' or stdin (tool-input JSON),
    or one question from --question/--option. The agent stays live while this runs."""
    if question is not None:
        if file is not None:
            raise click.UsageError("give either FILE or --question, not both")
        args: Any = _question_from_flags(question, options, header, multi, qid)
    else:
        args = _read_input(file)
    caller = _caller(agent, turn, owner)
    route = parse_scope_flags(scope)
    default = None
    if default_json is not None:
        try:
            default = json.loads(default_json)
        except ValueError as exc:
            raise click.BadParameter(
                f"not JSON ({exc}); expected answers like"
                ' \'[{"id": "q1", "selected": ["Yes"]}]\'',
                param_hint="--default",
            ) from None
        try:
            check_default(args, default)
        except AskError as exc:
            fail(exc)
    elif on_timeout == "default" and timeout is not None:
        for line in timeout_default_notice(args):
            click.echo(visible(line), err=True)
    terminal = is_terminal()

    async def run() -> tuple[str, AskError | None, str]:
        stop = stop_on_signals()
        async with Seam(settings=settings) as seam, seam.agent(caller.agent_id, caller.owner):

            def published(request_id: str) -> None:
                if terminal:
                    click.echo(waiting_line(request_id, caller.turn_id, settings), err=True)

            try:
                answers = await seam.ask(
                    args,
                    caller,
                    scope=route,
                    signal=stop,
                    timeout=timeout,
                    on_timeout=on_timeout,
                    default=default,
                    idempotency_key=idempotency_key,
                    on_published=published,
                )
            except AskError as exc:
                if exc.code is not ErrorCode.NO_ANSWERER:
                    raise
                return "", exc, await no_answerer_hint(seam)
            return answers.to_json(), None, ""

    with environment_context():  # TRACEPARENT: the ask joins the calling script's trace
        out, error, hint = run_cli(run)
    if error is not None:
        fail_with_hint(error, hint)
    click.echo(out)


def _read_input(file: Any) -> str:
    """The tool-input JSON from FILE or stdin, as text: bytes that are not UTF-8 are
    INVALID_REQUEST naming where, not a traceback. Read from a terminal, a line on
    stderr first says what is read and how to end it: `askq ask` typed alone would
    otherwise wait, silent, for input the person does not know it wants."""
    source = file or sys.stdin.buffer
    if _is_tty(source):
        click.echo(typing_hint(), err=True)
    raw: bytes = source.read()
    if not raw.strip():
        fail(
            AskError(
                ErrorCode.INVALID_REQUEST,
                "input: empty; give the tool-input JSON on stdin or as FILE, or one"
                " question with -q 'Deploy now?' -o Yes -o No",
            )
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(
            AskError(
                ErrorCode.INVALID_REQUEST,
                f"input: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            )
        )
        raise AssertionError("unreachable") from None


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def typing_hint() -> str:
    end = "Ctrl-D on a line of its own" if os.name == "posix" else "Ctrl-Z, then Enter"
    return (
        "askq ask: reading the question as tool-input JSON from the terminal; type or"
        f" paste it, then end it with {end}. To ask one question without JSON:"
        " askq ask -q 'Deploy now?' -o Yes -o No"
    )


_CALLER_FLAGS = {"agent_id": "--agent", "turn_id": "--turn", "owner": "--owner"}


def _caller(agent: str | None, turn: str | None, owner: str | None) -> Caller:
    """The caller from the flags; a bad one is INVALID_REQUEST naming the flag."""
    given = {
        "agent_id": agent or f"cli-{uuid.uuid4().hex[:8]}",
        "turn_id": turn or uuid.uuid4().hex,
        "owner": owner,
    }
    try:
        return validate_model(Caller, given)
    except AskError as exc:
        message = exc.message
        for field, flag in _CALLER_FLAGS.items():
            message = message.replace(f"{field}:", f"{flag}:")
        fail(AskError(exc.code, message))
        raise AssertionError("unreachable") from None


@main.command()
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve Prometheus metrics on this port (ASKQ_METRICS_PORT; needs the 'metrics' extra).",
)
@click.pass_obj
def sweeper(settings: Settings, metrics_port: int | None) -> None:
    """Run a sweeper: timers (decision windows, escalation, reminders, timeouts) and
    recovery (gone callers, orphaned claims, stream trimming). Run one or more."""
    from arq.worker import Worker

    from ..observing._metrics import check_metrics, start_metrics
    from ..redis._arq import run_supervised
    from ..sweeping._sweeper import worker_settings

    try:
        check_metrics(settings, metrics_port)  # before anything starts or connects
    except AskError as exc:
        fail(exc)

    async def run() -> None:
        stop = stop_on_signals()
        options = worker_settings(settings)  # a sweep interval the cron cannot run: refused
        async with Seam(settings=settings):
            pass  # entering pings Redis: one clear line if it is unreachable
        served = start_metrics(settings, metrics_port)
        task = asyncio.create_task(
            run_supervised("askq sweeper", lambda: Worker(**options, handle_signals=False))
        )
        where = f", metrics on {served}" if served else ""
        click.echo(
            f"askq sweeper: ready (maintenance every {settings.sweep_interval:g} s,"
            f" arq poll {settings.poll_delay:g} s{where})",
            err=True,
        )
        await run_until_stopped(task, stop)  # run_supervised closes the worker on its way out

    run_cli(run)


@main.command()
@click.argument("turn")
@click.pass_obj
def abort(settings: Settings, turn: str) -> None:
    """Abort TURN: its pending asks settle ABORTED everywhere; later asks fail at once."""

    if not turn.strip():
        fail(
            AskError(
                ErrorCode.INVALID_REQUEST,
                "turn: empty; give the turn id `askq ask` printed (or the --turn it was given)",
            )
        )

    async def run() -> tuple[int, bool]:
        async with Seam(settings=settings) as seam:
            with redis_errors(settings):
                known = bool(await seam.redis.exists(seam.shard_of_turn(turn).keys.aborted(turn)))
            return await seam.abort_turn(turn, by="cli"), known

    count, already = run_cli(run)
    turn = visible(turn)  # as the terminal should show it (a bidi override, an escape)
    if count:
        click.echo(f"turn {turn} aborted; {count} pending request(s) cancelled")
    elif already:
        click.echo(f"turn {turn} was already aborted; no pending asks left to cancel")
    else:
        click.echo(
            f"turn {turn} aborted; no pending asks of it are known under prefix"
            f" {settings.prefix!r} on {redacted(settings.redis_url)} (check the turn id,"
            " --prefix and --redis-url). Later asks of it fail at once."
        )


@main.command()
@click.option("--auto", "auto", is_flag=True, help="Answer by rules instead of at the terminal.")
@click.option(
    "--redis-url",
    "demo_url",
    default=None,
    help="Run on this Redis (under a prefix of its own, removed at the end) instead of"
    " the embedded one. ASKQ_REDIS_URL is not used.",
)
def demo(auto: bool, demo_url: str | None) -> None:
    """The whole round trip on one machine: an agent asks the seed's question; you
    answer it here (or the rules do, with --auto). Uses an embedded Redis, so it never
    joins a real deployment, unless --redis-url is given here."""
    from ._demo import run_demo

    run_cli(lambda: run_demo(auto=auto, redis_url=demo_url))


@main.command()
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http.")
@click.option("--port", type=int, default=8765, show_default=True, help="With --http.")
@click.pass_obj
def mcp(settings: Settings, http: bool, host: str, port: int) -> None:
    """Serve ask_user_question as an MCP server (stdio by default; --http for streamable
    HTTP at /mcp). Who asks: ASKQ_MCP_AGENT_ID, ASKQ_MCP_OWNER (see docs/integrations.md).
    Needs the mcp extra: pip install 'askq[mcp]'."""
    try:  # imported here: the core never imports the mcp SDK
        from ..integrations.mcp import McpSettings, serve_http, serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name not in ("mcp", "mcp_types", "uvicorn"):
            raise
        fail(
            AskError(
                ErrorCode.CONFIG_ERROR,
                f"askq mcp needs the mcp extra ({exc.name} is"
                " missing); run: pip install 'askq[mcp]'",
            )
        )
        return
    try:
        mcp_settings = McpSettings.from_env()
    except AskError as exc:
        fail(exc)
        return
    if http and not 0 <= port <= 65535:  # uvicorn said "ready" on 99999, then nothing
        fail(
            AskError(
                ErrorCode.CONFIG_ERROR,
                f"--port {port}: not a port; give 1-65535, or 0 for any free port",
            )
        )
    if http:
        run_cli(
            lambda: serve_http(
                settings,
                mcp_settings,
                host,
                port,
                on_ready=lambda url: click.echo(f"askq mcp: serving {url}: ready", err=True),
            )
        )
    elif not run_cli(lambda: serve_stdio(settings, mcp_settings)):
        # Stopped by a signal with stdin open: everything is withdrawn and closed, but
        # the SDK's stdin reader thread would hold the interpreter at exit.
        flush_traces()  # os._exit skips the tracer provider's own flush at exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@main.command()
def answerers() -> None:
    """List the installed answerer kinds (`askq.answerers` entry points) and the
    options each takes after `askq worker KIND`."""
    for kind in answerer_kinds():
        try:
            cls = load_answerer(kind)
        except AskError as exc:
            click.echo(f"{kind}: {exc.message}")
            continue
        click.echo(kind)
        for name, field in cls.Options.model_fields.items():
            flag = "--" + name.replace("_", "-")
            click.echo(f"  {flag:<16} {field.description or ''}".rstrip())


@main.command("claude-code-hook")
@click.option("--agent", default=None, help="Calling agent id (default: claude-code:<session>).")
@click.option("--turn", default=None, help="Turn id (default: the prompt's id, else the session).")
@click.option("--scope", "scope", multiple=True, help="Routing label key=value (repeatable).")
@click.option("--timeout", type=float, default=None, help="Seconds to wait, then deny TIMED_OUT.")
@click.pass_obj
def claude_code_hook(
    settings: Settings,
    agent: str | None,
    turn: str | None,
    scope: tuple[str, ...],
    timeout: float | None,
) -> None:
    """Claude Code PreToolUse hook for AskUserQuestion: reads the hook input JSON on
    stdin, asks through askq, writes the hook output JSON (allow with the answers, or
    deny with the reason). See docs/integrations.md."""
    from ..integrations.claude_code import hook_main

    route = parse_scope_flags(scope)
    hook_main(
        settings, sys.stdin.buffer.read(), agent=agent, turn=turn, scope=route, timeout=timeout
    )


main.add_command(status)
main.add_command(worker)
main.add_command(group)
main.add_command(show)
main.add_command(requests)
main.add_command(audit)
main.add_command(health)
