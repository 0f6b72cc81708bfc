"""`askq requests` and `askq status` as a person reads them (issue 22, items 15 and
18): at 80 columns, piped and on a terminal (a pty of 80 columns), with long agent
text, each request takes two lines and the ids stay whole; `--wide` gives one line
each, nothing cut; a filter that matches nothing says so on stderr; the status
columns say what they show."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from conftest import Backend, running
from rich.cells import cell_len
from test_processes import ASKQ, askq

from askq import Caller, Seam
from askq.answerers.memory import MemoryAnswerer

GROUP = "payments-approvals-desk-for-the-night-shift"
AGENTS = [f"agent-with-a-rather-long-name-in-the-payments-fleet-{n}" for n in range(3)]
TURNS = [f"turn-{n}-" + "0123456789abcdef" * 3 for n in range(3)]
HEADER = "Production deploy approval"
QUESTION = {
    "questions": [
        {
            "id": "q1",
            "header": HEADER,
            "question": "Deploy build 1432 of payments-api to production now?",
            "options": [{"label": "Yes"}, {"label": "No"}],
        }
    ]
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@asynccontextmanager
async def three_requests(backend: Backend) -> AsyncIterator[list[str]]:
    """Three requests of long-named agents held by a long-named group: one answered,
    two pending. Yields their ids, the last asked first."""
    holder = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, holder, GROUP):
        asks = []
        ids = []
        for agent, turn in zip(AGENTS, TURNS, strict=True):
            asks.append(
                asyncio.create_task(seam.ask(QUESTION, Caller(agent_id=agent, turn_id=turn)))
            )
            ids.append((await holder.next_presented()).request_id)
        await holder.answer(ids[0], [{"id": "q1", "selected": ["Yes"]}], by="alice")
        await asks[0]
        try:
            yield ids[::-1]
        finally:
            await _withdraw(seam, asks)


async def _withdraw(seam: Seam, asks: list[asyncio.Task[Any]]) -> None:
    for turn in TURNS:
        await seam.abort_turn(turn)
    await asyncio.gather(*asks, return_exceptions=True)


def on_a_terminal(backend: Backend, *args: str, columns: int = 80) -> str:
    """`askq ARGS` with stdout on a pty of `columns` columns (no COLUMNS in its
    environment: the width is the terminal's); what it wrote, colours removed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = backend.env()
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    proc = subprocess.Popen(
        [*ASKQ, *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        assert ready, "no output within 30 s"
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    return ANSI.sub("", out.decode()).replace("\r\n", "\n")


def fits(text: str, columns: int = 80) -> list[str]:
    lines = text.splitlines()
    too_wide = [line for line in lines if cell_len(line.rstrip()) > columns]
    assert not too_wide, text
    return lines


def rows_of(lines: list[str], ids: list[str]) -> dict[str, list[str]]:
    """Each request's lines: the one its id starts and those up to the next id."""
    found: dict[str, list[str]] = {}
    current = None
    for line in lines:
        starts = [i for i in ids if line.lstrip().startswith(i)]
        if starts:
            current = starts[0]
            found[current] = []
        if current is not None and line.strip():
            found[current].append(line)
    return found


def check_two_lines_each(text: str, ids: list[str]) -> None:
    lines = fits(text)
    rows = rows_of(lines, ids)
    assert sorted(rows) == sorted(ids), text  # every id whole, at the start of its row
    for request_id, agent, turn in zip(ids, AGENTS[::-1], TURNS[::-1], strict=True):
        first, *rest = rows[request_id]
        assert len(rest) == 1, text  # two lines a request, not one letter a line
        under = rest[0]
        assert HEADER in under, text  # the header, under the id, in full
        # the long agent text is cut to fit, with an ellipsis: its start is there
        assert agent[:12] in first and turn[:10] in under, text
        assert agent not in first and "…" in first, text
    assert "ANSWERED" in rows[ids[-1]][0] and "by alice" in rows[ids[-1]][1], text
    assert "CLAIMED" in rows[ids[0]][0] and "tier 0" in rows[ids[0]][1], text
    for name in ("request", "state", "agent", "turn", "groups", "outcome"):
        assert re.search(rf"\b{name}\b", text), (name, text)


async def test_requests_at_80_columns_piped_and_on_a_terminal(backend: Backend) -> None:
    """Three requests took 89 lines at 80 columns, each column one letter wide."""
    async with three_requests(backend) as ids:
        piped = await asyncio.to_thread(askq, backend, "requests", COLUMNS="80")
        assert piped.returncode == 0, piped.stderr
        assert "\x1b" not in piped.stdout  # no colours into a pipe
        check_two_lines_each(piped.stdout, ids)
        assert len(piped.stdout.splitlines()) <= 4 + 2 * len(ids), piped.stdout

        terminal = await asyncio.to_thread(on_a_terminal, backend, "requests")
        check_two_lines_each(terminal, ids)

        # --wide: one line a request, every field whole, however wide the line
        wide = await asyncio.to_thread(askq, backend, "requests", "--wide", COLUMNS="80")
        assert wide.returncode == 0, wide.stderr
        lines = wide.stdout.splitlines()
        for request_id, agent, turn in zip(ids, AGENTS[::-1], TURNS[::-1], strict=True):
            [line] = [line for line in lines if request_id in line]
            assert agent in line and turn in line and GROUP in line and HEADER in line
        assert len(lines) == 4 + len(ids) + 1, wide.stdout  # title, head, rows, rules

        # a terminal wide enough for one line each gets one line each, nothing cut
        roomy = await asyncio.to_thread(on_a_terminal, backend, "requests", columns=300)
        for request_id, agent in zip(ids, AGENTS[::-1], strict=True):
            [line] = [line for line in roomy.splitlines() if request_id in line]
            assert agent in line and GROUP in line, roomy


async def test_status_pending_requests_at_80_columns(backend: Backend) -> None:
    """`askq status` listed the same long text one letter (or four) a line; its
    columns now say what they show: a replica's last beat and when its registration
    lapses (not how long it has been live), what a group holds."""
    async with three_requests(backend) as ids:
        pending = ids[:2]  # the third was answered
        piped = await asyncio.to_thread(askq, backend, "status", COLUMNS="80")
        assert piped.returncode == 0, piped.stderr
        lines = fits(piped.stdout)
        start = next(n for n, x in enumerate(lines) if x.startswith("pending requests"))
        end = next(n for n, x in enumerate(lines) if x.startswith("failed sends"))
        table = lines[start:end]
        rows = rows_of(table, pending[::-1])
        assert sorted(rows) == sorted(pending), piped.stdout
        for request_id in pending:
            assert len(rows[request_id]) == 2 and HEADER in rows[request_id][1], piped.stdout
        # a group's name, what `askq group remove` takes, whole in its tables
        assert len([line for line in lines[:start] if GROUP in line]) == 2, piped.stdout
        assert "live for" not in piped.stdout
        for name in ("last beat", "lapses in", "holding", "waiting on", "asked"):
            assert name in piped.stdout, (name, piped.stdout)
        terminal = await asyncio.to_thread(on_a_terminal, backend, "status")
        fits(terminal)
        for request_id in pending:
            assert any(line.startswith(request_id) for line in terminal.splitlines())

        status = await asyncio.to_thread(askq, backend, "status", "--json")
        [group] = json.loads(status.stdout)["groups"]
        [replica] = group["replicas"]
        assert 0 < replica["lapses_in_seconds"] <= 15, replica


async def test_a_filter_that_matches_nothing_says_so(backend: Backend) -> None:
    """An unknown --group or --agent printed an empty table and nothing else."""
    async with three_requests(backend):
        nothing = await asyncio.to_thread(askq, backend, "requests", "--group", "nosuch")
        assert nothing.returncode == 0 and nothing.stdout == "", nothing
        [line] = nothing.stderr.splitlines()
        assert 'no request matches --group "nosuch"' in line, line
        assert f"no group of that name is registered (groups: {GROUP})" in line, line
        assert "ASKQ_SETTLED_TTL" in line and backend.prefix in line, line

        nobody = await asyncio.to_thread(askq, backend, "requests", "--agent", "nobody")
        [line] = nobody.stderr.splitlines()
        assert 'no request matches --agent "nobody"' in line and "registered" not in line

        # a group that exists but was offered none of them: no "not registered"
        known = await asyncio.to_thread(
            askq, backend, "requests", "--group", GROUP, "--state", "FAILED", "--json"
        )
        assert known.stdout.strip() == "[]", known.stdout
        [line] = known.stderr.splitlines()
        assert "--state" in line and "registered" not in line, line
