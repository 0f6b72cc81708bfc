"""`askq worker KIND`: one command per installed answerer kind, built from its
`Options` model, so `askq worker auto --help` lists the kind's own options with their
choices and defaults beside the group's, and a mistyped flag is named with the closest
valid one (`CONFIG_ERROR: auto: no option --polcy; did you mean --policy?`).

Values are checked by the kind's pydantic model, not by click, so a bad one is one
CONFIG_ERROR naming the flag, like every other bad setting.
"""

from __future__ import annotations

import difflib
import enum
import sys
import types
import typing
from typing import Any

import click
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from ..answering._answerer import Answerer
from ..answering._plugins import answerer_kinds, load_answerer
from ..answering._runtime import AnswererRuntime
from ..protocol._errors import AskError, ErrorCode
from ..protocol._settings import Settings
from ..protocol._text import cut, problems_message, visible
from ..seam._seam import Seam
from ._base import add_global_options, fail, parse_scope_flags, run_cli

# The group's options, every kind's: (flags, click keyword arguments).
_GROUP_OPTIONS: list[tuple[list[str], dict[str, Any]]] = [
    (["--group"], {"default": None, "help": "Answerer group name (default: the kind)."}),
    (
        ["--priority"],
        {"default": 0, "type": int, "show_default": True, "help": "Tier; lower goes first."},
    ),
    (
        ["--scope"],
        {
            "multiple": True,
            "help": "Accept only requests whose scope matches key=pattern (repeatable;"
            " shell patterns).",
        },
    ),
    (["--consumer"], {"default": None, "help": "Replica name; keep it stable across restarts."}),
    (
        ["--decision-window"],
        {
            "type": float,
            "default": None,
            "help": "Seconds to accept or decline an offer before it counts as declined"
            " (default: ASKQ_DECISION_WINDOW).",
        },
    ),
    (
        ["--escalate-after"],
        {
            "type": float,
            "default": None,
            "help": "Seconds a claimed question may go unanswered before it moves on to"
            " the next tier (needs a sweeper).",
        },
    ),
    (
        ["--remind-after"],
        {
            "type": float,
            "default": None,
            "help": "Seconds until the channel reminds its humans (needs a sweeper).",
        },
    ),
    (
        ["--metrics-port"],
        {
            "type": int,
            "default": None,
            "help": "Serve Prometheus metrics on this port (ASKQ_METRICS_PORT; needs the"
            " 'metrics' extra).",
        },
    ),
]
GROUP_PARAMS = {flags[0].lstrip("-").replace("-", "_") for flags, _ in _GROUP_OPTIONS}


def _choices(annotation: Any) -> list[str] | None:
    """The values a Literal or Enum field (optional or not) may take."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return [str(v) for v in typing.get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(m.value) for m in annotation]
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _choices(arg)
            if found:
                return found
    return None


def _is(annotation: Any, kind: type) -> bool:
    if annotation is kind:
        return True
    return any(_is(arg, kind) for arg in typing.get_args(annotation))


def _kind_option(name: str, field: FieldInfo) -> click.Option:
    """A click option for one field of a kind's Options: passed through as text (the
    model checks it), its choices as the metavar, its default in the help."""
    flag = "--" + name.replace("_", "-")
    annotation = field.annotation
    help_text = field.description or ""
    default = field.get_default(call_default_factory=True)
    if default is not None and default is not False:
        help_text += f"  [default: {default.value if isinstance(default, enum.Enum) else default}]"
    if field.is_required():
        help_text += "  [required]"
    if _is(annotation, bool) and not typing.get_args(annotation):
        return click.Option([flag], is_flag=True, default=None, help=help_text)
    choices = _choices(annotation)
    multiple = typing.get_origin(annotation) in (list, tuple, set) or any(
        typing.get_origin(a) in (list, tuple, set) for a in typing.get_args(annotation)
    )
    metavar = "|".join(choices) if choices else "TEXT"
    return click.Option(
        [flag], default=None, multiple=multiple, metavar=metavar, help=help_text or None
    )


class KindCommand(click.Command):
    """`askq worker KIND`: the kind's own options, then the group's, in two sections of
    the help; an unknown flag is a CONFIG_ERROR naming the closest valid one, and so is
    a value that is not UTF-8 text (`_base.CheckedContext`)."""

    text_error_code = ErrorCode.CONFIG_ERROR

    def __init__(self, kind: str, *args: Any, kind_params: set[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.kind_params = kind_params

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            flags = sorted({o for p in self.params for o in p.opts if o.startswith("--")})
            close = difflib.get_close_matches(exc.option_name, flags, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            own = ", ".join(f for f in flags if f.lstrip("-").replace("-", "_") in self.kind_params)
            fail(
                AskError(
                    ErrorCode.CONFIG_ERROR,
                    f"{self.kind}: no option {cut(visible(exc.option_name), 40)}{hint}"
                    f" (its options: {own or 'none'}; `askq worker {self.kind} --help` lists all)",
                )
            )
            raise AssertionError("unreachable") from None

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name = param.name or ""
            if name in self.kind_params:
                title = f"Options of {self.kind}"
            elif name in GROUP_PARAMS:
                title = "Group options"
            else:
                title = "Global options"
            sections.setdefault(title, []).append(record)
        for title in (f"Options of {self.kind}", "Group options", "Global options"):
            if sections.get(title):
                with formatter.section(title):
                    formatter.write_dl(sections[title])


def _failing(kind: str, error: AskError) -> click.Command:
    """A kind that cannot be loaded (unknown, or its extra not installed): running it
    is the one CONFIG_ERROR line saying why."""
    return click.Command(
        kind,
        callback=lambda: fail(error),
        help=error.message,
        short_help=cut(error.message, 60),
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


def kind_command(kind: str) -> click.Command:
    try:
        cls = load_answerer(kind)
    except AskError as exc:
        return _failing(kind, exc)
    kind_params = set(cls.Options.model_fields)
    params: list[click.Parameter] = [
        _kind_option(name, field) for name, field in cls.Options.model_fields.items()
    ]
    params += [
        click.Option(flags, **options)
        for flags, options in _GROUP_OPTIONS
        if flags[0].lstrip("-").replace("-", "_") not in kind_params
    ]
    module_doc = getattr(sys.modules.get(cls.__module__), "__doc__", None)
    doc = " ".join((cls.__doc__ or module_doc or "").strip().split("\n\n")[0].split())
    return KindCommand(
        kind,
        name=kind,
        params=params,
        kind_params=kind_params,
        callback=click.pass_context(lambda ctx, **values: _run_worker(ctx, cls, kind, values)),
        help=f"Run one replica of an answerer group of kind {kind}. {doc}".strip(),
        short_help=cut(doc, 60) if doc else None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


class WorkerGroup(click.Group):
    """The kinds are the installed answerers (`askq.answerers` entry points)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return answerer_kinds()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            # `askq worker --priority 3 auto`: the options belong to the kind's command.
            kinds = ", ".join(answerer_kinds())
            fail(
                AskError(
                    ErrorCode.CONFIG_ERROR,
                    f"askq worker: {cut(visible(exc.option_name), 40)} goes after the kind"
                    f" (`askq worker KIND {cut(visible(exc.option_name), 40)} ...`;"
                    f" kinds: {kinds})",
                )
            )
            raise AssertionError("unreachable") from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return add_global_options(kind_command(cmd_name))


@click.group(
    cls=WorkerGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    subcommand_metavar="KIND [OPTIONS]",
)
def worker() -> None:
    """Run one replica of an answerer group. KIND is an installed answerer (`askq
    answerers`); `askq worker KIND --help` lists its options."""


def _kind_values(cls: type[Answerer[Any]], values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in cls.Options.model_fields:
        value = values.get(name)
        if value is None or value == ():
            continue
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def _run_worker(
    ctx: click.Context, cls: type[Answerer[Any]], kind: str, values: dict[str, Any]
) -> None:
    settings: Settings = ctx.obj
    selector = parse_scope_flags(values.get("scope") or ())
    try:
        options = cls.Options.model_validate(_kind_values(cls, values))
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
    from ..observing._metrics import check_metrics, start_metrics

    port = values.get("metrics_port")
    try:
        check_metrics(settings, port)  # before anything starts or connects
    except AskError as exc:
        fail(exc)
    group = values.get("group") or kind
    priority = values.get("priority", 0)

    async def run() -> None:
        async with Seam(settings=settings) as seam:
            runtime = AnswererRuntime(
                seam,
                answerer,
                group=group,
                priority=priority,
                scope=selector,
                consumer=values.get("consumer"),
                decision_window=values.get("decision_window"),
                escalate_after=values.get("escalate_after"),
                remind_after=values.get("remind_after"),
            )
            served = start_metrics(settings, port)

            def ready() -> None:
                where = f", metrics on {served}" if served else ""
                click.echo(
                    f"askq worker: {runtime.group} ({kind}) priority {priority},"
                    f" replica {runtime.consumer}{where}: ready",
                    err=True,
                )

            await runtime.serve(on_ready=ready)

    run_cli(run)
