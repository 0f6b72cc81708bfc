"""The operator's view of requests: `askq show ID`, `askq requests`, `askq audit tail`.

Agent text (questions, labels, ids, `by`) is printed as data: control characters
written out escaped (`visible`), never markup.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import sys
from typing import Any

import click

from ..observing._audit import (
    STATES,
    Audit,
    AuditEntry,
    RequestDetail,
    RequestFilter,
    RequestSummary,
)
from ..protocol._errors import AskError
from ..protocol._settings import Settings
from ..protocol._text import quoted, visible
from ..redis._wire import redacted
from ..seam._seam import Seam
from ._base import run_cli


def _audit(seam: Seam) -> Audit:
    return Audit(seam.redis, seam.shards[0].keys, seam.settings, seam.layout)


def clock(ms: int | None) -> str:
    """Server time (ms) as a UTC wall clock with milliseconds."""
    if ms is None:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def _echo(text: str = "") -> None:
    click.echo(visible(text))


@click.command()
@click.argument("request_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def show(settings: Settings, request_id: str, as_json: bool) -> None:
    """One request in full: its questions, scope and caller, where it is or how it
    ended, its timeline (every transition, by whom, when) and its answers."""

    async def run() -> RequestDetail:
        async with Seam(settings=settings) as seam:
            return await _audit(seam).show(request_id)

    detail = run_cli(run)
    if as_json:
        click.echo(detail.model_dump_json(indent=2))
        return
    print_detail(detail)


def print_detail(d: RequestDetail) -> None:
    _echo(f"request  {d.id}")
    _echo(f"state    {d.outcome}")
    owner = f", owner {d.owner}" if d.owner else ""
    _echo(f"caller   agent {d.agent}, turn {d.turn}{owner}")
    scope = ", ".join(f"{k}={v}" for k, v in sorted(d.scope.items())) or "(none)"
    _echo(f"scope    {scope}")
    _echo(f"asked    {clock(d.created_ms)}")
    if d.settled_ms is not None:
        took = (d.settled_ms - (d.created_ms or d.settled_ms)) / 1000
        _echo(f"settled  {clock(d.settled_ms)} (after {took:.3f} s)")
    _echo()
    _echo("questions")
    for q in d.questions:
        multi = " (multi-select)" if q.multi_select else ""
        _echo(f"  {q.id} [{q.header}] {q.question}{multi}")
        for n, option in enumerate(q.options, 1):
            description = f" — {option.description}" if option.description else ""
            _echo(f"    {n}. {option.label}{description}")
    _echo()
    _echo("timeline")
    start = d.timeline[0].t if d.timeline else (d.created_ms or 0)
    for entry in d.timeline:
        offset = f"+{(entry.t - start) / 1000:8.3f}s"
        _echo(f"  {clock(entry.t)[11:23]}  {offset}  {entry.describe(d.agent, d.turn)}")
    if not d.timeline:
        _echo("  (no trail: asked before askq kept one)")
    if d.answers is not None:
        _echo()
        _echo("answers" + (" (the ask's default, on timeout)" if d.defaulted else f" by {d.by}"))
        for a in d.answers:
            picked = ", ".join(a.selected) or "-"
            custom = f"; custom: {a.custom}" if a.custom is not None else ""
            _echo(f"  {a.id}: {picked}{custom}")
    elif d.message:
        _echo()
        _echo(f"the caller was told: {d.message}")


@click.command()
@click.option("--state", type=click.Choice(STATES, case_sensitive=False), default=None)
@click.option("--agent", default=None, help="Only this agent's requests.")
@click.option("--turn", default=None, help="Only this turn's requests.")
@click.option("--group", default=None, help="Only requests offered to this group.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10000))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--wide", is_flag=True, help="One line per request, nothing cut, however long.")
@click.pass_obj
def requests(
    settings: Settings,
    state: str | None,
    agent: str | None,
    turn: str | None,
    group: str | None,
    limit: int,
    as_json: bool,
    wide: bool,
) -> None:
    """The pending requests and the recently settled ones (kept for ASKQ_SETTLED_TTL),
    newest first. `askq show ID` tells one in full. On a narrow terminal (or piped)
    each takes two lines, long text cut; --wide prints one line each, in full."""
    if state is not None and state.lower() not in ("pending", "settled"):
        state = state.upper()
    elif state is not None:
        state = state.lower()
    keep = RequestFilter(state=state, agent=agent, turn=turn, group=group)

    async def run() -> tuple[list[RequestSummary], dict[str, int]]:
        async with Seam(settings=settings) as seam:
            rows = await _audit(seam).requests(keep, limit)
            groups = await seam.registry.priorities() if not rows and group else {}
            return rows, groups

    rows, groups = run_cli(run)
    if not rows:
        click.echo(_nothing_matched(settings, keep, groups), err=True)
    if as_json:
        click.echo(json.dumps([r.model_dump() for r in rows], indent=2))
        return
    if not rows:
        return
    from rich.console import Console

    from ._table import fitted_table

    console = Console(highlight=False, width=100_000 if wide else None, soft_wrap=wide)
    cells = [
        {
            "request": r.id,
            "state": r.state.value,
            "header": r.header,
            "agent": r.agent,
            "turn": r.turn,
            "groups": ",".join(r.groups),
            "asked (UTC)": clock(r.created_ms)[11:19],
            "outcome": _summary_outcome(r),
        }
        for r in rows
    ]
    order = ["request", "state", "header", "agent", "turn", "groups", "asked (UTC)", "outcome"]
    pairs = [
        ("request", "header"),
        ("state", "outcome"),
        ("agent", "turn"),
        ("asked (UTC)", "groups"),
    ]
    title = "requests (newest first)"
    console.print(fitted_table(title, order, pairs, cells, console, whole={"request"}))


def _nothing_matched(settings: Settings, keep: RequestFilter, groups: dict[str, int]) -> str:
    """For the person who listed: what was looked through, and (for a group that is not
    registered) which groups are."""
    asked = [
        f"{flag} {quoted(value)}"
        for flag, value in (
            ("--state", keep.state),
            ("--agent", keep.agent),
            ("--turn", keep.turn),
            ("--group", keep.group),
        )
        if value is not None
    ]
    where = f"under prefix {quoted(settings.prefix)} on {redacted(settings.redis_url)}"
    kept = f"settled in the last {_duration(settings.settled_ttl)} (ASKQ_SETTLED_TTL)"
    if not asked:
        return f"askq requests: no request is pending, and none was {kept}, {where}"
    line = (
        f"askq requests: no request matches {' '.join(asked)} among those pending and"
        f" those {kept}, {where}"
    )
    if keep.group is not None and keep.group not in groups:
        known = ", ".join(visible(name) for name in sorted(groups)[:10]) or "none"
        more = " ..." if len(groups) > 10 else ""
        line += f"; no group of that name is registered (groups: {known}{more})"
    return line


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        days = seconds // 86400
        return "day" if days == 1 else f"{days} days"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _summary_outcome(r: RequestSummary) -> str:
    if r.state == "ANSWERED":
        return f"by {r.by}"
    if r.state == "CANCELLED":
        return AuditEntry(t=0, e="cancelled", reason=r.reason, code=r.code).describe()
    if r.state == "FAILED":
        return r.code
    return f"tier {r.tier}, {r.age_seconds:.0f}s"


@click.group()
def audit() -> None:
    """The deployment's audit stream ({prefix}:audit; written when
    ASKQ_AUDIT_STREAM_MAXLEN > 0 on the workers, sweepers and callers)."""


@audit.command("tail")
@click.option("-n", "--lines", default=20, show_default=True, type=click.IntRange(0))
@click.option("-f", "--follow", is_flag=True, help="Keep printing entries as they are written.")
@click.option("--jsonl", is_flag=True, help="One JSON object per line (for a log shipper).")
@click.pass_obj
def audit_tail(settings: Settings, lines: int, follow: bool, jsonl: bool) -> None:
    """The last entries of the audit stream; with -f, then every new one."""

    async def run() -> int:
        from ..answering._runtime import stop_on_signals

        stop = stop_on_signals()  # Ctrl-C or SIGTERM ends `-f` cleanly
        count = 0
        async with Seam(settings=settings) as seam:
            # Each shard's stream on a blocking connection of its own (ASKQ_SHARDS).
            conns = [seam.blocking_connection(shard.index) for shard in seam.shards]
            audits = [Audit(seam.redis, s.keys, seam.settings) for s in seam.shards]

            async def consume() -> None:
                nonlocal count
                if len(audits) == 1:
                    async for entry in audits[0].tail(conns[0], last=lines, follow=follow):
                        count += 1
                        _print_entry(entry, jsonl)
                    return
                # The last entries of every shard, oldest first (stream ids are ms),
                # then each new one of any shard as it comes.
                merged: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
                last = [await _lasts(a, lines) for a in audits]
                for entry in sorted((e for es in last for e in es), key=_entry_order)[-lines:]:
                    count += 1
                    _print_entry(entry, jsonl)
                if not follow:
                    return

                async def follow_one(audit: Audit, conn: Any) -> None:
                    skip = len(await _lasts(audit, 1))
                    async for entry in audit.tail(conn, last=1, follow=True):
                        if skip:
                            skip -= 1  # printed above
                            continue
                        await merged.put(entry)

                followers = [
                    asyncio.ensure_future(follow_one(a, c))
                    for a, c in zip(audits, conns, strict=True)
                ]
                try:
                    while True:
                        count += 1
                        _print_entry(await merged.get(), jsonl)
                finally:
                    for f in followers:
                        f.cancel()

            task = asyncio.ensure_future(consume())
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                task.cancel()
                for conn in conns:
                    await conn.aclose()  # fails a blocked read the cancel may not reach
                with contextlib.suppress(asyncio.CancelledError, AskError):
                    await task
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return count

    count = run_cli(run)
    if count == 0 and not follow:
        click.echo(
            "the audit stream is empty (is ASKQ_AUDIT_STREAM_MAXLEN set where requests"
            " are asked and answered? each request's own trail is in `askq show ID`)",
            err=True,
        )


async def _lasts(audit: Audit, lines: int) -> list[dict[str, Any]]:
    """The last `lines` entries of one shard's stream (no follow)."""
    found = []
    async for entry in audit.tail(audit.redis, last=lines, follow=False):
        found.append(entry)
    return found


def _entry_order(entry: dict[str, Any]) -> tuple[int, int]:
    ms, _, seq = str(entry.get("id", "0-0")).partition("-")
    return int(ms or 0), int(seq or 0)


def _print_entry(entry: dict[str, Any], jsonl: bool) -> None:
    if jsonl:
        click.echo(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
    else:
        try:
            parsed = AuditEntry.model_validate({k: v for k, v in entry.items() if k != "id"})
            text = f"{clock(parsed.t)}  {entry.get('request', '')}  {parsed.describe()}"
        except ValueError:
            text = json.dumps(entry)
        click.echo(visible(text))
    sys.stdout.flush()
