"""What `askq ask` tells the person at the terminal, beside the JSON it prints for a
script: the one line while it waits (a terminal only), the operator's hint when no
answerer group is live, what a timeout default will pick, and the shape `--default`
expects. All of it on stderr: stdout stays the answers JSON and nothing else.
"""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import AskInput, Question, parse_answers, parse_input
from ..protocol._settings import Settings
from ..protocol._text import cut, quoted, visible
from ..redis._wire import redacted
from ..seam._seam import Seam

RECOMMENDED = " (Recommended)"


def is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _global_flags(settings: Settings) -> str:
    """The flags another `askq` command needs to reach the same deployment, when they
    are not the defaults (as given: ASKQ_* in the environment is the user's own)."""
    flags = ""
    if settings.prefix != "askq":
        flags += f" --prefix {shlex.quote(settings.prefix)}"
    return flags


def waiting_line(request_id: str, turn: str, settings: Settings) -> str:
    abort = f"askq abort {shlex.quote(visible(turn))}{_global_flags(settings)}"
    return (
        f"askq: waiting for an answer to request {request_id} (turn {visible(turn)});"
        f" Ctrl-C cancels, or `{abort}` from another shell"
    )


def _parsed(args: Any) -> AskInput | None:
    try:
        return parse_input(args)
    except AskError:
        return None  # the ask itself reports it, naming the field


def _example(questions: list[Question]) -> str:
    shape = []
    for q in questions:
        if q.options:
            shape.append({"id": q.id, "selected": [q.recommended[0]]})
        else:
            shape.append({"id": q.id, "custom": "text"})
    return cut(json.dumps(shape, ensure_ascii=False), 300)


def check_default(args: Any, default: Any) -> None:
    """`--default` against the questions, before anything is asked: a bad one is
    INVALID_REQUEST naming the problem and showing the shape it expects."""
    parsed = _parsed(args)
    if parsed is None:
        return
    try:
        parse_answers(parsed.questions, default)
    except AskError as exc:
        raise AskError(
            ErrorCode.INVALID_REQUEST,
            f"--default: {exc.message}; expected a list of answers like"
            f" {_example(parsed.questions)} (or {{\"answers\": [...]}})",
        ) from None


def timeout_default_notice(args: Any) -> list[str]:
    """For `--on-timeout default` without `--default`: the option a timeout will pick
    for each question where none is marked recommended (the first one)."""
    parsed = _parsed(args)
    if parsed is None:
        return []
    lines = []
    for q in parsed.questions:
        if q.options and not any(label.endswith(RECOMMENDED) for label in q.labels):
            lines.append(
                f"askq: on timeout, question {quoted(q.id)} will be answered"
                f" {quoted(q.labels[0])} (its first option: none is marked"
                f" '{RECOMMENDED.strip()}'); --default picks another"
            )
    return lines


async def no_answerer_hint(seam: Seam) -> str:
    """For the operator (not the model): how many groups are live under this prefix,
    and how to start one."""
    settings = seam.settings
    where = f"prefix {settings.prefix!r} on {redacted(settings.redis_url)}"
    try:
        groups = await seam.registry.priorities()
        live = [name for name in sorted(groups) if await seam.registry.live_replicas(name)]
    except AskError:
        return f"hint: no answerer group could be checked under {where}"
    start = (
        f"start one in another terminal: `askq{_global_flags(settings)} worker console`"
        " (or `worker auto` to answer by rules), and `askq sweeper` for windows,"
        " escalation and reminders"
    )
    if not live:
        known = f" ({len(groups)} registered, none with a live replica)" if groups else ""
        return f"hint: no answerer group is live under {where}{known}; {start}"
    names = ", ".join(visible(name) for name in live[:5]) + (" ..." if len(live) > 5 else "")
    return (
        f"hint: {len(live)} answerer group(s) live under {where} ({names}), and every one"
        f" declined (check their --scope against the ask's --scope); or {start}"
    )


def fail_with_hint(exc: AskError, hint: str) -> None:
    click.echo(visible(f"{exc.code.value}: {exc.message}", multiline=True), err=True)
    click.echo(hint, err=True)
    sys.exit(exc.exit_status)
