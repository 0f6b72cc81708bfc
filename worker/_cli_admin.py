"""The operator's commands: `askq status` and `askq group list | remove | prune`."""

from __future__ import annotations

import json
from typing import Any

import click

from ._cli_base import run_cli
from ._models import GroupStatus
from ._seam import Seam
from ._settings import Settings
from ._text import visible


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=50, show_default=True, help="Requests to list.")
@click.pass_obj
def status(settings: Settings, as_json: bool, limit: int) -> None:
    """Answerer groups (priority, live replicas, pending offers) and pending requests."""

    async def run() -> Any:
        async with Seam(settings=settings) as seam:
            return await seam.status(limit=limit)

    result = run_cli(run)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        return
    from rich.console import Console

    console = Console(highlight=False)
    console.print(_groups_table(result.groups))
    requests = _table(
        "pending requests",
        ["request", "state", "tier", "waiting on", "header", "agent", "turn", "age"],
    )
    for r in result.requests:
        requests.add_row(
            *_cells(
                r.id[:12],
                r.state,
                str(r.tier),
                ",".join(r.claimers or r.undecided),
                r.header,
                r.agent,
                r.turn,
                f"{r.age_seconds:.0f}s",
            )
        )
    console.print(requests)


def _table(title: str, columns: list[str]) -> Any:
    from rich.table import Table

    return Table(*columns, title=title)


def _cells(*values: str) -> list[Any]:
    """Table cells as plain text: agent text (a header, an agent id) is neither rich
    markup nor terminal control sequences."""
    from rich.text import Text

    return [Text(visible(value)) for value in values]


def _groups_table(groups: list[GroupStatus]) -> Any:
    table = _table("groups", ["group", "kind", "priority", "scope", "live replicas", "pending"])
    for g in groups:
        scope = ", ".join(f"{k}={v}" for k, v in g.scope.items()) or "*"
        table.add_row(
            *_cells(g.name, g.kind, str(g.priority), scope, str(g.live_consumers), str(g.pending))
        )
    return table


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

    Console(highlight=False).print(_groups_table(groups))


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
