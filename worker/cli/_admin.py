"""The operator's commands: `askq status` and `askq group list | remove | prune |
set-priority`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

import click

from ..observing._status import FullStatus, full_status
from ..protocol._models import GroupStatus
from ..protocol._settings import Settings
from ..protocol._text import visible
from ..redis._wire import redacted
from ..seam._seam import Seam
from ._base import run_cli
from ._inspect import clock


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=50, show_default=True, help="Pending requests to list.")
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="--watch: seconds.",
)
@click.option("--wide", is_flag=True, help="Never fold a column (lines as long as they need).")
@click.pass_obj
def status(
    settings: Settings, as_json: bool, limit: int, watch: bool, interval: float, wide: bool
) -> None:
    """Answerer groups (priority, scope, kind, live replicas and their heartbeats),
    sweepers, pending requests by state and tier (the oldest listed, full ids) and
    channel sends that gave up."""
    from rich.console import Console

    console = Console(highlight=False, width=100_000 if wide else None, soft_wrap=wide)
    if watch and not as_json:
        run_cli(lambda: _watch(settings, limit, interval, console))
        return

    async def run() -> FullStatus:
        async with Seam(settings=settings) as seam:
            return await full_status(seam, limit)

    result = run_cli(run)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        return
    console.print(_screen(result, settings, console))


async def _watch(settings: Settings, limit: int, interval: float, console: Any) -> None:
    """The status screen, redrawn in place every `interval` s until Ctrl-C/SIGTERM."""
    import asyncio

    from rich.live import Live

    from ..answering._runtime import stop_on_signals

    stop = stop_on_signals()
    async with Seam(settings=settings) as seam:
        with Live(console=console, auto_refresh=False) as live:
            while not stop.is_set():
                screen = _screen(await full_status(seam, limit), settings, console)
                live.update(screen, refresh=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s ago"


def _screen(s: FullStatus, settings: Settings, console: Any) -> Any:
    from rich.console import Group
    from rich.text import Text

    from ._table import fitted_table

    parts: list[Any] = [
        Text(visible(f"askq on {redacted(settings.redis_url)}, prefix {settings.prefix}"))
    ]
    parts.append(_groups_table(s.groups, console))
    # "lapses in": what is left of the replica's registration; each beat renews it, so
    # it is how long the replica stays counted live if it stops beating (not uptime).
    replicas = [
        {
            "group": g.name,
            "replica": replica.name,
            "last beat": _age(replica.beat_age_seconds),
            "lapses in": f"{replica.lapses_in_seconds:.1f}s",
        }
        for g in s.groups
        for replica in g.replicas
    ]
    if replicas:
        order = ["group", "replica", "last beat", "lapses in"]
        pairs = [("group", "replica"), ("last beat", "lapses in")]
        caption = "lapses in: when a replica that stops beating counts as gone"
        parts.append(
            fitted_table(
                "live replicas",
                order,
                pairs,
                replicas,
                console,
                whole={"group", "replica"},
                caption=caption,
            )
        )
    else:
        parts.append(Text("live replicas: none"))
    sweepers = _table("sweepers", ["sweeper", "last beat", "state", "timers fired"])
    for w in s.sweepers:
        state = "live" if w.live else "gone"
        sweepers.add_row(*_cells(w.name, _age(w.beat_age_seconds), state, str(w.fired)))
    parts.append(
        sweepers
        if sweepers.row_count
        else Text("sweepers: none (decision windows, escalations, reminders and timeouts wait)")
    )
    states = ", ".join(f"{state} {n}" for state, n in s.pending_by_state.items()) or "none"
    tiers = ", ".join(f"tier {tier}: {n}" for tier, n in s.pending_by_tier.items()) or "-"
    parts.append(Text(f"pending: {s.pending_total} ({states}; {tiers})"))
    if s.requests:
        rows = [
            {
                "request": r.id,
                "state": r.state,
                "tier": str(r.tier),
                "waiting on": ",".join(r.claimers or r.undecided),
                "header": r.header,
                "agent": r.agent,
                "turn": r.turn,
                "asked": f"{r.age_seconds:.0f}s ago",
            }
            for r in s.requests
        ]
        order = ["request", "state", "tier", "waiting on", "header", "agent", "turn", "asked"]
        pairs = [
            ("request", "header"),
            ("state", "tier"),
            ("agent", "turn"),
            ("asked", "waiting on"),
        ]
        title = "pending requests (oldest first)"
        parts.append(fitted_table(title, order, pairs, rows, console, whole={"request"}))
    parts.append(Text(f"failed sends: {s.failed_sends_total}"))
    if s.failed_sends:
        failed = _table(
            "latest failed sends", ["when", "queue", "job", "request", "tries", "error"]
        )
        failed.columns[3].no_wrap = True
        for f in s.failed_sends:
            when = clock(int(f.id.partition("-")[0]))[:19]
            failed.add_row(*_cells(when, f.queue, f.job, f.request, str(f.tries), f.error))
        parts.append(failed)
    return Group(*parts)


def _table(title: str, columns: list[str]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _cells(*values: str) -> list[Any]:
    """Table cells as plain text: agent text (a header, an agent id) is neither rich
    markup nor terminal control sequences."""
    from rich.text import Text

    return [Text(visible(value)) for value in values]


def _groups_table(groups: Sequence[GroupStatus], console: Any) -> Any:
    from ._table import fitted_table

    rows = [
        {
            "group": g.name,
            "kind": g.kind,
            "priority": str(g.priority),
            "scope": ", ".join(f"{k}={v}" for k, v in g.scope.items()) or "*",
            "live replicas": str(g.live_consumers),
            "holding": str(g.pending),
        }
        for g in groups
    ]
    order = ["group", "kind", "priority", "scope", "live replicas", "holding"]
    pairs = [("group", "scope"), ("priority", "kind"), ("live replicas", "holding")]
    return fitted_table(
        "groups (tiers by priority, lowest first)",
        order,
        pairs,
        rows,
        console,
        whole={"group"},  # a name to act on (`askq group remove NAME`)
        caption="holding: the requests it is deciding on or has claimed",
    )


@click.group()
def group() -> None:
    """The answerer groups: list them, remove one (to change its priority or scope),
    prune those with no live replica."""


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def group_list(settings: Settings, as_json: bool) -> None:
    """Every registered group: priority, kind, scope, live replicas, entries pending."""

    async def run() -> list[GroupStatus]:
        async with Seam(settings=settings) as seam:
            return (await seam.status(limit=0)).groups

    groups = run_cli(run)
    if as_json:
        click.echo(json.dumps([g.model_dump() for g in groups], indent=2))
        return
    from rich.console import Console

    console = Console(highlight=False)
    console.print(_groups_table(groups, console))


@group.command("remove")
@click.argument("name")
@click.pass_obj
def group_remove(settings: Settings, name: str) -> None:
    """Remove group NAME (stop its replicas first): what it holds is given back, so
    the waterfall moves on, and it is forgotten. Its replicas may then start with
    another priority or scope."""

    async def run() -> int:
        async with Seam(settings=settings) as seam:
            return await seam.registry.remove(name)

    moved = run_cli(run)
    click.echo(f"group {name} removed; {moved} request(s) it held moved on")


@group.command("prune")
@click.pass_obj
def group_prune(settings: Settings) -> None:
    """Remove every group that has no live replica (as `remove` does)."""

    async def run() -> list[str]:
        async with Seam(settings=settings) as seam:
            return await seam.registry.prune()

    removed = run_cli(run)
    click.echo(f"removed {len(removed)} group(s) with no live replica: {', '.join(removed) or '-'}")


@group.command("set-priority")
@click.argument("name")
@click.argument("priority", type=int)
@click.pass_obj
def group_set_priority(settings: Settings, name: str, priority: int) -> None:
    """Move group NAME to PRIORITY (its tier). A group has one priority, which its
    running replicas hold, so stop them first; what it held is given back (the
    waterfall moves on), then start them again with --priority PRIORITY."""

    async def run() -> int:
        async with Seam(settings=settings) as seam:
            return await seam.registry.set_priority(name, priority)

    moved = run_cli(run)
    click.echo(
        f"group {name} now has priority {priority}; {moved} request(s) it held moved on."
        f" Start its replicas with --priority {priority}"
    )
