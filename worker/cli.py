"""`askq`: ask from the shell, run answerer workers, abort turns, see status, demo.

Failures print `CODE: message` on stderr and exit with the code's status (README,
"Error codes"); an unreachable Redis is one line naming the URL, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from redis.exceptions import RedisError

from ._errors import AskError, ErrorCode
from ._models import Caller
from ._plugins import answerer_kinds, load_answerer
from ._runtime import AnswererRuntime, run_until_stopped, stop_on_signals
from ._seam import Seam
from ._settings import Settings, settings_error

T = TypeVar("T")


def _fail(exc: AskError) -> None:
    click.echo(f"{exc.code.value}: {exc.message}", err=True)
    sys.exit(exc.exit_status)


def _run(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; AskErrors become `CODE: message` and their exit status."""
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except AskError as exc:
        _fail(exc)
    except RedisError as exc:  # a reply askq did not expect (e.g. a script error)
        _fail(AskError(ErrorCode.INTERNAL, f"unexpected Redis reply: {exc}"))
    raise AssertionError("unreachable")


def _scope(pairs: tuple[str, ...]) -> dict[str, str]:
    scope = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected key=value", param_hint="--scope")
        scope[key] = value
    return scope


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--redis-url", envvar="ASKQ_REDIS_URL", help="Default: redis://localhost:6379/0")
@click.option("--prefix", envvar="ASKQ_PREFIX", help="Key prefix (default askq).")
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, prefix: str | None) -> None:
    """askq: let AI agents stop and ask a human, over Redis."""
    given: dict[str, Any] = {"redis_url": redis_url, "prefix": prefix}
    overrides = {k: v for k, v in given.items() if v}
    ctx.meta["redis_configured"] = bool(redis_url)
    try:
        ctx.obj = Settings(**overrides)
    except ValidationError as exc:
        _fail(settings_error(exc))


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
@click.argument("file", required=False, type=click.File("r"))
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
        source: Any = file or sys.stdin
        args = source.read()
    caller = Caller(
        agent_id=agent or f"cli-{uuid.uuid4().hex[:8]}",
        turn_id=turn or uuid.uuid4().hex,
        owner=owner,
    )
    route = _scope(scope)
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

    click.echo(_run(run))


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
    selector = _scope(scope)
    try:
        cls = load_answerer(kind)
        options = cls.Options.model_validate(_answerer_options(ctx.args))
        answerer = cls(options)
    except AskError as exc:
        _fail(exc)
        return
    except ValidationError as exc:
        fields = ", ".join(f"--{name.replace('_', '-')}" for name in cls.Options.model_fields)
        problems = "; ".join(
            f"--{'.'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}"
            for e in exc.errors()
        )
        _fail(AskError(ErrorCode.CONFIG_ERROR, f"{kind}: {problems} (options: {fields or 'none'})"))
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

    _run(run)


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

    _run(run)


@main.command()
@click.argument("turn")
@click.pass_obj
def abort(settings: Settings, turn: str) -> None:
    """Abort TURN: its pending asks settle ABORTED everywhere; later asks fail at once."""

    async def run() -> int:
        async with Seam(settings=settings) as seam:
            return await seam.abort_turn(turn, by="cli")

    count = _run(run)
    click.echo(f"turn {turn} aborted; {count} pending request(s) cancelled")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=50, show_default=True, help="Requests to list.")
@click.pass_obj
def status(settings: Settings, as_json: bool, limit: int) -> None:
    """Answerer groups (priority, live replicas, pending offers) and pending requests."""

    async def run() -> Any:
        async with Seam(settings=settings) as seam:
            return await seam.status(limit=limit)

    result = _run(run)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    groups = Table("group", "kind", "priority", "scope", "live replicas", "pending", title="groups")
    for g in result.groups:
        scope = ", ".join(f"{k}={v}" for k, v in g.scope.items()) or "*"
        groups.add_row(
            g.name, g.kind, str(g.priority), scope, str(g.live_consumers), str(g.pending)
        )
    requests = Table(
        "request",
        "state",
        "tier",
        "waiting on",
        "header",
        "agent",
        "turn",
        "age",
        title="pending requests",
    )
    for r in result.requests:
        waiting = ",".join(r.claimers or r.undecided)
        requests.add_row(
            r.id[:12],
            r.state,
            str(r.tier),
            waiting,
            r.header,
            r.agent,
            r.turn,
            f"{r.age_seconds:.0f}s",
        )
    console = Console()
    console.print(groups)
    console.print(requests)


@main.command()
@click.option("--auto", "auto", is_flag=True, help="Answer by rules instead of at the terminal.")
@click.pass_context
def demo(ctx: click.Context, auto: bool) -> None:
    """The whole round trip on one machine: an agent asks the seed's question; you
    answer it here (or the rules do, with --auto). Uses an embedded Redis unless
    ASKQ_REDIS_URL or --redis-url names one."""
    from ._demo import run_demo

    settings = ctx.obj if ctx.meta.get("redis_configured") else None
    _run(lambda: run_demo(auto=auto, settings=settings))


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


if __name__ == "__main__":  # pragma: no cover
    main()
