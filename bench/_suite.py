"""The bench's runner: the sections given, one after another against one Redis (its
own `redis-server` unless --redis-url names one), printed as one table.

`python -m bench` runs every section (`bench/__main__.py`); `python -m bench.roundtrip`
runs its own alone. The sections' modules are not imported here, so none of them
imports its own runner back.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table

from . import _procs
from ._common import Config, Context, Section
from ._redis_server import RedisServer

DESCRIPTION = "`python -m bench`: every benchmark of askq in one run, printed as one table."

Sections = dict[str, Callable[[Context], Awaitable[Section]]]


def machine(info: dict[str, object]) -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {ram:.0f} GiB RAM, redis-server"
        f" {info.get('redis_version')}, Python {platform.python_version()}"
    )


def table(sections: list[Section], title: str) -> Table:
    t = Table(title=title, show_lines=False, title_justify="left")
    t.add_column("measure")
    t.add_column("figure", justify="right")
    t.add_column("beside it")
    t.add_column("goal")
    t.add_column("", justify="center")
    for i, section in enumerate(sections):
        t.add_row(f"[bold]{section.title}[/bold]", end_section=False)
        for row in section.rows:
            mark = "" if row.met is None else ("[green]met[/]" if row.met else "[red]missed[/]")
            t.add_row("  " + row.measure, row.figure, row.beside, row.goal, mark)
        if i < len(sections) - 1:
            t.add_section()
    return t


def markdown(sections: list[Section], title: str) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        f"**{title}**",
        "",
        "| measure | figure | beside it | goal | |",
        "|---|--:|---|---|---|",
    ]
    for section in sections:
        lines.append(f"| **{cell(section.title)}** | | | | |")
        for row in section.rows:
            mark = "" if row.met is None else ("met" if row.met else "**missed**")
            lines.append(
                f"| {cell(row.measure)} | {cell(row.figure)} | {cell(row.beside)}"
                f" | {cell(row.goal)} | {mark} |"
            )
    return "\n".join(lines) + "\n"


async def run(
    sections_run: Sections, args: argparse.Namespace, cfg: Config
) -> list[Section]:
    server = None if args.redis_url else RedisServer().start()
    url = args.redis_url or server.url  # type: ignore[union-attr]
    client = aioredis.Redis.from_url(url, decode_responses=True)
    sections: list[Section] = []
    console = Console(stderr=True)
    try:
        info = await client.info("server")
        ctx = Context(url=url, cfg=cfg, redis=client, redis_pid=int(info["process_id"]))
        ctx.results["machine"] = machine(info)
        for name, section in sections_run.items():
            if args.only and name not in args.only:
                continue
            started = time.monotonic()
            console.print(f"bench: {name} ...", highlight=False)
            sections.append(await section(ctx))
            console.print(f"bench: {name} done in {time.monotonic() - started:.1f} s")
    finally:
        _procs.stop_all()
        await client.aclose()
        if server is not None:
            server.stop()
    out = Console()
    if not out.is_terminal:
        out = Console(width=200)
    title = f"askq bench — {ctx.results['machine']}"
    out.print(table(sections, title))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(sections, title))
    return sections


def main(sections_run: Sections, argv: list[str] | None = None) -> list[Section]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds (CI)")
    parser.add_argument("-n", type=int, help="sequential round trips (default 3000)")
    parser.add_argument("--only", action="append", choices=list(sections_run), help="repeatable")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cfg = Config.quick_run() if args.quick else Config()
    if args.n:
        cfg.n = args.n
    started = time.monotonic()
    sections = asyncio.run(run(sections_run, args, cfg))
    Console(stderr=True).print(f"bench: {time.monotonic() - started:.0f} s in all")
    return sections

