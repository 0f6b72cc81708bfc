"""`askq health worker|sweeper`: the probe a supervisor runs for a process on this host
(a Kubernetes exec probe, a compose healthcheck). It asks Redis whether the process's
heartbeat is fresh, which is what other processes go by: a replica whose beat lapsed
has its claims taken over, a sweeper whose beat lapsed fires nothing. So the probe
fails when the process is hung (its event loop no longer beats), not only when it is
gone, and when Redis is out of reach.

Exit 0 and one `ok:` line when healthy; else `NOT_FOUND: ...` (10) or
`REDIS_UNAVAILABLE: ...` (11), as every askq command fails.

Which process: `--consumer NAME` for a replica started with that name; without it, any
replica of the group whose name is this host's name or starts with it (`askq worker`
names a replica `<hostname>-<pid>-...` by default; a container or pod has a host name
of its own). A sweeper is always `<hostname>:<pid>`.
"""

from __future__ import annotations

import json
import socket

import click

from ..protocol._errors import AskError, ErrorCode
from ..protocol._settings import Settings
from ..redis._connections import redis_errors, server_ms
from ..seam._seam import Seam
from ._base import run_cli


@click.group()
def health() -> None:
    """Probe: is a worker replica or a sweeper on this host beating in Redis?"""


def _mine(name: str, host: str, separator: str) -> bool:
    return name == host or name.startswith(host + separator)


@health.command("worker")
@click.option("--group", required=True, help="The replica's answerer group.")
@click.option("--consumer", default=None, help="The replica's name (default: this host's).")
@click.pass_obj
def health_worker(settings: Settings, group: str, consumer: str | None) -> None:
    """Exit 0 when a replica of GROUP on this host (or named --consumer) is live."""
    host = socket.gethostname()

    async def run() -> str:
        async with Seam(settings=settings) as seam:
            live = await seam.registry.live_replicas(group)
        if consumer is not None:
            found = [name for name in live if name == consumer]
        else:
            found = [name for name in live if _mine(name, host, "-")]
        if not found:
            who = f"replica {consumer!r}" if consumer else f"replica on host {host!r}"
            raise AskError(
                ErrorCode.NOT_FOUND,
                f"no live {who} of group {group!r} under prefix {settings.prefix!r}"
                f" ({len(live)} live replica(s) of the group elsewhere)",
            )
        return f"ok: {', '.join(found)} of group {group} live"

    click.echo(run_cli(run))


@health.command("sweeper")
@click.pass_obj
def health_sweeper(settings: Settings) -> None:
    """Exit 0 when a sweeper on this host has beaten within its TTL."""
    host = socket.gethostname()

    async def run() -> str:
        async with Seam(settings=settings) as seam:
            with redis_errors(settings):
                now = await server_ms(seam.redis)
                beats = await seam.redis.hgetall(seam.keys.sweepers)  # type: ignore[misc]
        fresh = []
        for name, raw in beats.items():
            try:
                facts = json.loads(raw)
                live = facts["beat_ms"] + facts["ttl_ms"] > now
            except (ValueError, TypeError, KeyError):
                continue
            if live and _mine(name, host, ":"):
                fresh.append(name)
        if not fresh:
            raise AskError(
                ErrorCode.NOT_FOUND,
                f"no sweeper on host {host!r} has beaten within its TTL under prefix"
                f" {settings.prefix!r}",
            )
        return f"ok: sweeper {', '.join(fresh)} live"

    click.echo(run_cli(run))
