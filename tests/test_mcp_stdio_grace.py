"""`askq mcp` over stdio when its client dies mid-call: the real `mcp` SDK client in a
process of its own (`mcp_client_process.py`), SIGKILLed while the human has not yet
answered. Its server (in a session of its own, as the SDK launches it) sees stdin
close: the dropped call keeps its question for ASKQ_MCP_REATTACH_GRACE, and a client
restarted meanwhile (with a new server) that re-issues the call reattaches to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import NO, NO_JSON, SEED, Backend, running
from mcp_servers import ERAS, mcp_env

from askq import Seam
from askq.answerers.memory import MemoryAnswerer

pytest.importorskip("mcp")

CLIENT = str(Path(__file__).with_name("mcp_client_process.py"))


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped counts: it runs nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


class Clients:
    """Client processes started by a test, and the servers they launched: each ended by
    its id when the test ends."""

    def __init__(self, backend: Backend, tmp: Path, **env: str) -> None:
        self.env = mcp_env(backend, **env)
        self.tmp = tmp
        self.procs: list[asyncio.subprocess.Process] = []
        self.pid_files: list[Path] = []

    async def start(self, era: str, meta: dict[str, str]) -> asyncio.subprocess.Process:
        pid_file = self.tmp / f"server-{len(self.pid_files)}.pid"
        self.pid_files.append(pid_file)
        # The client's stderr, and its server's (inherited), in a file: what they said
        # is there when a test fails, and no pipe fills while nobody reads it.
        with (self.tmp / f"client-{len(self.procs)}.err").open("w") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                CLIENT,
                era,
                json.dumps(SEED),
                json.dumps(meta),
                str(pid_file),
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                env=self.env,
            )
        self.procs.append(proc)
        return proc

    def said(self) -> str:
        return "".join(
            f"--- client {i} and its server:\n{(self.tmp / f'client-{i}.err').read_text()}"
            for i in range(len(self.procs))
        )

    async def result_of(self, proc: asyncio.subprocess.Process) -> dict[str, Any]:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, self.said()
        result: dict[str, Any] = json.loads(out)
        return result

    def server(self, i: int) -> int:
        return int(self.pid_files[i].read_text())

    async def server_exits(self, i: int, within: float) -> None:
        pid, deadline = self.server(i), asyncio.get_running_loop().time() + within
        while not gone(pid):
            assert asyncio.get_running_loop().time() < deadline, (
                f"server {pid} still running\n{self.said()}"
            )
            await asyncio.sleep(0.05)

    async def kill(self, proc: asyncio.subprocess.Process) -> None:
        proc.kill()  # SIGKILL: no goodbye; its server's stdin closes
        await proc.wait()

    async def aclose(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.communicate()
        for pid_file in self.pid_files:
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
                pid = int(pid_file.read_text())
                if not gone(pid):
                    os.kill(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def clients(backend: Backend, tmp: Path, **env: str) -> AsyncIterator[Clients]:
    started = Clients(backend, tmp, **env)
    try:
        yield started
    finally:
        await started.aclose()


def call_meta(reissue: str) -> dict[str, str]:
    """The client names the run (its turn), and the call by its id or by its arguments."""
    meta = {"io.askq/turn": f"turn-{uuid.uuid4().hex}"}
    if reissue == "toolCallId":
        meta["io.askq/toolCallId"] = "call_1"
    return meta


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("reissue", ["toolCallId", "arguments"])
async def test_a_client_killed_mid_call_and_restarted_reattaches(
    backend: Backend, seam: Seam, tmp_path: Path, era: str, reissue: str
) -> None:
    """The human is asked once and the restarted client gets the answer. The grace is
    long here (a restart on a loaded machine takes seconds); the first server exits
    once the re-issue has taken its call over, not at the end of the grace."""
    mem = MemoryAnswerer()
    meta = call_meta(reissue)
    async with (
        running(seam, mem, "humans"),
        clients(backend, tmp_path, ASKQ_MCP_REATTACH_GRACE="60") as procs,
    ):
        first = await procs.start(era, meta)
        offer = await mem.next_presented(30)
        await procs.kill(first)
        second = await procs.start(era, meta)
        await procs.server_exits(0, within=40)  # its dropped call taken over
        assert mem.presented.empty() and mem.retracted.empty(), procs.said()
        await mem.answer(offer.request_id, NO)
        assert await procs.result_of(second) == {"is_error": False, "text": NO_JSON}
        assert mem.presented.empty() and mem.retracted.empty()  # asked once


@pytest.mark.parametrize("era", ERAS)
async def test_a_dropped_call_nobody_reissues_is_withdrawn_after_the_grace(
    backend: Backend, seam: Seam, tmp_path: Path, era: str
) -> None:
    mem = MemoryAnswerer()
    async with (
        running(seam, mem, "humans"),
        clients(backend, tmp_path, ASKQ_MCP_REATTACH_GRACE="1.5") as procs,
    ):
        client = await procs.start(era, call_meta("toolCallId"))
        offer = await mem.next_presented(30)
        killed = asyncio.get_running_loop().time()
        await procs.kill(client)
        retraction = await mem.next_retracted(30)
        waited = asyncio.get_running_loop().time() - killed
        assert (retraction.request_id, retraction.state) == (offer.request_id, "CANCELLED")
        assert waited >= 1.5, f"withdrawn {waited:.2f} s after the client died, not after the grace"
        await procs.server_exits(0, within=20)


@pytest.mark.parametrize("era", ERAS)
async def test_a_turn_aborted_while_its_client_was_gone_stays_aborted(
    backend: Backend, seam: Seam, tmp_path: Path, era: str
) -> None:
    """The grace keeps a dropped call's question open, not an aborted turn's: `askq
    abort` withdraws it at once, and the restarted client's re-issue is told ABORTED."""
    mem = MemoryAnswerer()
    meta = call_meta("toolCallId")
    async with (
        running(seam, mem, "humans"),
        clients(backend, tmp_path, ASKQ_MCP_REATTACH_GRACE="60") as procs,
    ):
        first = await procs.start(era, meta)
        offer = await mem.next_presented(30)
        await procs.kill(first)
        aborted = subprocess.run(
            [sys.executable, "-m", "askq", "abort", meta["io.askq/turn"]],
            capture_output=True,
            text=True,
            timeout=30,
            env=backend.env(),
        )
        assert aborted.returncode == 0, aborted.stderr
        assert (await mem.next_retracted(20)).request_id == offer.request_id
        await procs.server_exits(0, within=20)  # nothing left to keep
        result = await procs.result_of(await procs.start(era, meta))
        assert result["is_error"] and result["text"].startswith("ABORTED: "), result
        assert mem.presented.empty()
