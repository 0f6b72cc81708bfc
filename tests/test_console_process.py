"""The console worker as a real process: what its standard input may be, and what it
gives back when it stops (Ctrl-C)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import NO_JSON, ROOT, SEED, Backend

from askq import AskError, Caller, ErrorCode, Seam

ASKQ = [sys.executable, "-m", "askq"]
PIPE = asyncio.subprocess.PIPE


async def _exec(
    backend: Backend, *command: str, stdin: Any, **env: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command, stdin=stdin, stdout=PIPE, stderr=PIPE, env=backend.env(**env)
    )


async def _ask(seam: Seam, turn: str = "t") -> Any:
    return await seam.ask(SEED, Caller(agent_id="a", turn_id=turn))


async def _refused_while_running(
    seam: Seam, proc: asyncio.subprocess.Process, within: float = 20
) -> tuple[bytes, bytes]:
    """Ask again and again while `proc` runs: every ask must fail NO_ANSWERER at once
    (a worker that registered and claimed one would leave it hanging). Returns the
    process's output once it has exited."""
    output = asyncio.create_task(proc.communicate())
    async with asyncio.timeout(within):
        while not output.done():
            with pytest.raises(AskError) as err:
                await asyncio.wait_for(_ask(seam), 5)
            assert err.value.code is ErrorCode.NO_ANSWERER
            await asyncio.sleep(0.05)
    return await output


def _one_config_error(err: bytes, why: str) -> str:
    text = err.decode()
    assert text.startswith(f"CONFIG_ERROR: console: {why}. "), text
    assert text.count("\n") == 1 and "Traceback" not in text, text
    assert "askq worker auto" in text and "docker run -i" in text
    return text


# (the default loop, uvloop where installed, and each named: libuv would abort the
# process with a closed stdin; run_on_loop keeps such a process on asyncio)
@pytest.mark.parametrize("loop", ["auto", "uvloop", "asyncio"])
@pytest.mark.parametrize(
    ("stdin", "why"),
    [("devnull", "standard input is /dev/null"), ("closed", "standard input is closed")],
)
async def test_console_without_a_usable_stdin_refuses_to_start(
    backend: Backend, stdin: str, why: str, loop: str
) -> None:
    if stdin == "devnull":
        command, fd0 = [*ASKQ, "worker", "console"], subprocess.DEVNULL
    else:  # fd 0 not open at all, as some supervisors start a process
        command, fd0 = ["sh", "-c", 'exec "$@" <&-', "sh", *ASKQ, "worker", "console"], None
    async with backend.seam() as seam:
        proc = await _exec(backend, *command, stdin=fd0, ASKQ_EVENT_LOOP=loop)
        _, err = await _refused_while_running(seam, proc)
        assert proc.returncode == 12, err
        _one_config_error(err, why)
        # It never registered: no group of that name, so nothing was ever offered to it.
        assert await seam.redis.hget(seam.keys.groups, "console") is None


def test_demo_without_a_usable_stdin_ends_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKQ_")}
    env["PYTHONPATH"] = str(ROOT)
    demo = subprocess.run(
        [*ASKQ, "demo"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert demo.returncode == 12
    _one_config_error(demo.stderr, "standard input is /dev/null")


async def test_console_reads_answers_from_a_file(backend: Backend, tmp_path: Path) -> None:
    answers = tmp_path / "answers.txt"
    answers.write_text("2\n")
    async with backend.seam() as seam:
        with answers.open("rb") as file:
            proc = await _exec(backend, *ASKQ, "worker", "console", stdin=file)
        async with _stopped_at_exit(proc):
            await _ready(proc)
            assert (await asyncio.wait_for(_ask(seam), 10)).to_json() == NO_JSON


async def test_ctrl_c_gives_back_what_the_console_showed(backend: Backend) -> None:
    """SIGINT (Ctrl-C) with a question on screen: the asker is not left CLAIMED until
    ASKQ_ORPHAN_CLAIM_AFTER; with no tier after the console's it fails at once."""
    async with backend.seam() as seam:
        proc = await _exec(backend, *ASKQ, "worker", "console", stdin=PIPE)
        async with _stopped_at_exit(proc):
            await _ready(proc)
            asked = asyncio.create_task(_ask(seam))
            assert proc.stdout is not None
            await asyncio.wait_for(proc.stdout.readuntil(b"choose 1-3 > "), 10)  # claimed, shown
            proc.send_signal(signal.SIGINT)
            with pytest.raises(AskError) as err:
                await asyncio.wait_for(asked, 3)
            assert err.value.code is ErrorCode.NO_ANSWERER
            out, _ = await asyncio.wait_for(proc.communicate(), 10)
            assert proc.returncode == 0
            assert "stopping; 1 request(s) passed on" in out.decode()


async def _ready(proc: asyncio.subprocess.Process) -> None:
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 20)
    assert line.endswith(b": ready\n"), line + await proc.stderr.read()


@asynccontextmanager
async def _stopped_at_exit(proc: asyncio.subprocess.Process) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
