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
from pydantic import ValidationError

from ._cli_admin import group, status
from ._cli_base import CliGroup, fail, log_to_stderr, parse_scope_flags, run_cli
from ._errors import AskError, ErrorCode
from ._models import Caller, validate_model
from ._plugins import answerer_kinds, load_answerer
from ._runtime import AnswererRuntime, run_until_stopped, stop_on_signals
from ._seam import Seam
from ._settings import Settings, settings_error
from ._text import cut, problems_message, visible


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--redis-url", envvar="ASKQ_REDIS_URL", help="Default: redis://localhost:6379/0")
@click.option("--prefix", envvar="ASKQ_PREFIX", help="Key prefix (default askq).")
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, prefix: str | None) -> None:
    """askq: let AI agents stop and ask a human, over Redis."""
    log_to_stderr()
    given: dict[str, Any] = {"redis_url": redis_url, "prefix": prefix}
    overrides = {k: v for k, v in given.items() if v}
    try:
        ctx.obj = Settings(**overrides)
    except ValidationError as exc:
        fail(settings_error(exc))


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
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--default") from None

    async def run() -> str:
        stop = stop_on_signals()
        async with Seam(settings=settings) as seam, seam.agent(caller.agent_id, caller.owner):
            answers = await seam.ask(
                args,
                caller,
                scope=route,
                signal=stop,
                timeout=timeout,
                on_timeout=on_timeout,
                default=default,
                idempotency_key=idempotency_key,
            )
            return answers.to_json()

    click.echo(run_cli(run))


def _read_input(file: Any) -> str:
    """The tool-input JSON from FILE or stdin, as text: bytes that are not UTF-8 are
    INVALID_REQUEST naming where, not a traceback."""
    raw: bytes = (file or sys.stdin.buffer).read()
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


def _answerer_options(extra: list[str]) -> dict[str, Any]:
    """`--rules r.toml --policy first --flag` -> {"rules": "r.toml", ...}."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        token = extra[i]
        if not token.startswith("--"):
            raise click.UsageError(f"unexpected argument {token!r}")
        key, sep, value = token[2:].partition("=")
        key = key.replace("-", "_")
        if not sep:
            if i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                value, i = extra[i + 1], i + 1
            else:
                value = "true"
        if key in out:
            out[key] = (out[key] if isinstance(out[key], list) else [out[key]]) + [value]
        else:
            out[key] = value
        i += 1
    return out


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("kind")
@click.option("--group", default=None, help="Answerer group name (default: the kind).")
@click.option("--priority", default=0, show_default=True, type=int, help="Tier; lower goes first.")
@click.option(
    "--scope",
    "scope",
    multiple=True,
    help="Accept only requests whose scope matches key=pattern (repeatable; shell patterns).",
)
@click.option("--consumer", default=None, help="Replica name; keep it stable across restarts.")
@click.option(
    "--decision-window",
    type=float,
    default=None,
    help="Seconds to accept or decline an offer before it counts as declined"
    " (default: ASKQ_DECISION_WINDOW).",
)
@click.option(
    "--escalate-after",
    type=float,
    default=None,
    help="Seconds a claimed question may go unanswered before it moves on to the next tier.",
)
@click.option(
    "--remind-after", type=float, default=None, help="Seconds until the channel reminds its humans."
)
@click.pass_context
def worker(
    ctx: click.Context,
    kind: str,
    group: str | None,
    priority: int,
    scope: tuple[str, ...],
    consumer: str | None,
    decision_window: float | None,
    escalate_after: float | None,
    remind_after: float | None,
) -> None:
    """Run one replica of an answerer group. KIND is an installed answerer; its own
    options follow (e.g. `askq worker auto --rules rules.toml --policy first`); `askq
    answerers` lists them."""
    settings: Settings = ctx.obj
    selector = parse_scope_flags(scope)
    try:
        cls = load_answerer(kind)
        options = cls.Options.model_validate(_answerer_options(ctx.args))
        answerer = cls(options)
    except AskError as exc:
        fail(exc)
        return
    except ValidationError as exc:
        fields = ", ".join(f"--{name.replace('_', '-')}" for name in cls.Options.model_fields)
        problems = problems_message(
            [
                f"--{cut(visible('.'.join(map(str, e['loc'])).replace('_', '-')), 40)}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
        )
        fail(AskError(ErrorCode.CONFIG_ERROR, f"{kind}: {problems} (options: {fields or 'none'})"))
        return

    async def run() -> None:
        async with Seam(settings=settings) as seam:
            runtime = AnswererRuntime(
                seam,
                answerer,
                group=group or kind,
                priority=priority,
                scope=selector,
                consumer=consumer,
                decision_window=decision_window,
                escalate_after=escalate_after,
                remind_after=remind_after,
            )
            await runtime.serve(
                on_ready=lambda: click.echo(
                    f"askq worker: {runtime.group} ({kind}) priority {priority},"
                    f" replica {runtime.consumer}: ready",
                    err=True,
                )
            )

    run_cli(run)


@main.command()
@click.pass_obj
def sweeper(settings: Settings) -> None:
    """Run a sweeper: timers (decision windows, escalation, reminders, timeouts) and
    recovery (gone callers, orphaned claims, stream trimming). Run one or more."""
    from arq.worker import Worker

    from ._arq import run_supervised
    from ._sweeper import worker_settings

    async def run() -> None:
        stop = stop_on_signals()
        async with Seam(settings=settings):
            pass  # entering pings Redis: one clear line if it is unreachable
        task = asyncio.create_task(
            run_supervised(
                "askq sweeper", lambda: Worker(**worker_settings(settings), handle_signals=False)
            )
        )
        click.echo(
            f"askq sweeper: ready (maintenance every {settings.sweep_interval:g} s,"
            f" arq poll {settings.poll_delay:g} s)",
            err=True,
        )
        await run_until_stopped(task, stop)  # run_supervised closes the worker on its way out

    run_cli(run)


@main.command()
@click.argument("turn")
@click.pass_obj
def abort(settings: Settings, turn: str) -> None:
    """Abort TURN: its pending asks settle ABORTED everywhere; later asks fail at once."""

    async def run() -> int:
        async with Seam(settings=settings) as seam:
            return await seam.abort_turn(turn, by="cli")

    count = run_cli(run)
    click.echo(f"turn {turn} aborted; {count} pending request(s) cancelled")


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
        from .integrations.mcp import McpSettings, serve_http, serve_stdio
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


main.add_command(status)
main.add_command(group)

if __name__ == "__main__":  # pragma: no cover
    main()
