"""Across processes: the `askq` CLI, worker processes, SIGKILL, and cross-process abort.

Each test starts real `askq` processes (python -m askq) against the backend under test
(fakeredis is served over TCP from the test process, so subprocesses reach it too).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from conftest import NO_JSON, ROOT, SEED, YES, YES_JSON, Backend, _free_port, running

from askq import AskError, Caller, ErrorCode, RequestStatus, Seam
from askq.answerers.memory import MemoryAnswerer

ASKQ = [sys.executable, "-m", "askq"]


def askq(
    backend: Backend | None, *args: str, stdin: str = "", timeout: float = 30, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = backend.env(**env) if backend else {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [*ASKQ, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=environ
    )


@contextmanager
def worker_process(backend: Backend, *args: str) -> Iterator[subprocess.Popen[str]]:
    """An `askq worker ...` process, returned once it says it is ready."""
    proc = subprocess.Popen(
        [*ASKQ, "worker", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(),
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 20)
        assert ready, "worker did not start within 20 s"
        line = proc.stderr.readline()
        assert line.endswith(": ready\n"), line + proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream:
                stream.close()


async def start_ask(backend: Backend, *args: str, stdin: str = "") -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *ASKQ,
        "ask",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=backend.env(),
    )
    assert proc.stdin is not None
    proc.stdin.write(stdin.encode())
    proc.stdin.close()
    return proc


async def finish(proc: asyncio.subprocess.Process, timeout: float = 30) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@asynccontextmanager
async def memory_group(
    backend: Backend, mem: MemoryAnswerer, group: str = "humans", **kw: Any
) -> AsyncIterator[Seam]:
    async with backend.seam() as seam, running(seam, mem, group, **kw):
        yield seam


async def claimed(seam: Seam) -> RequestStatus:
    """The one pending request, once a group has claimed it."""
    for _ in range(200):
        pending = (await asyncio.wait_for(seam.status(), 5)).requests
        if pending and pending[0].state == "CLAIMED":
            return pending[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no request was claimed within 10 s")


def test_cli_round_trip_through_a_worker_process(backend: Backend) -> None:
    with worker_process(backend, "auto"):
        result = askq(backend, "ask", stdin=json.dumps(SEED))
        assert (result.returncode, result.stdout, result.stderr) == (0, YES_JSON + "\n", "")
        flags = askq(
            backend,
            "ask",
            "-q",
            "Deploy now?",
            "--header",
            "Deploy",
            "-o",
            "Wait",
            "-o",
            "Ship it (Recommended)|goes live at once",
        )
        assert flags.stdout == '{"answers":[{"id":"q1","selected":["Ship it (Recommended)"]}]}\n'


def test_ask_at_a_terminal_says_what_it_reads_and_how_to_end_it(backend: Backend) -> None:
    """Issue 22, item 17: `askq ask` with neither -q nor a FILE, at a terminal, waited
    silently on stdin. It says on stderr what it reads and how to end it (a pty as its
    stdin, as a person's shell gives it), then asks what was typed; empty input is
    refused naming what to give."""
    with worker_process(backend, "auto"):
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [*ASKQ, "ask"],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=backend.env(),
        )
        os.close(follower)
        try:
            assert proc.stderr is not None
            ready, _, _ = select.select([proc.stderr], [], [], 15)
            assert ready, "askq ask waits on the terminal without a word"
            line = proc.stderr.readline().decode()
            assert "tool-input JSON" in line and "Ctrl-D" in line, line
            assert "askq ask -q 'Deploy now?' -o Yes -o No" in line, line
            os.write(leader, json.dumps(SEED).encode() + b"\n\x04")  # a line, then Ctrl-D
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(leader)
        assert (proc.returncode, out.decode(), err.decode()) == (0, YES_JSON + "\n", "")
    # piped (not a terminal): nothing on stderr but the refusal of empty input
    empty = askq(backend, "ask", stdin="\n")
    assert (empty.returncode, empty.stdout) == (6, "")
    assert empty.stderr.startswith("INVALID_REQUEST: input: empty; give the tool-input JSON")


def test_cli_reads_a_file_and_fails_with_documented_statuses(
    backend: Backend, tmp_path: Any
) -> None:
    request = tmp_path / "ask.json"
    request.write_text(json.dumps(SEED))
    nobody = askq(backend, "ask", str(request))
    assert nobody.returncode == 3
    assert nobody.stderr.startswith("NO_ANSWERER: No answerer accepted this question")
    assert nobody.stdout == ""
    bad = askq(
        backend,
        "ask",
        stdin='{"questions":[{"id":"a","question":"?","header":"h",'
        '"options":[{"label":"x"},{"label":"x"}]}]}',
    )
    assert bad.returncode == 6
    assert bad.stderr == 'INVALID_REQUEST: questions[0].options[1].label: duplicate label "x"\n'


async def test_abort_from_another_process_while_the_caller_waits(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with memory_group(backend, mem):
        caller = await start_ask(backend, "--turn", "turn-X", stdin=json.dumps(SEED))
        offer = await mem.next_presented(timeout=20)
        assert offer.caller.turn_id == "turn-X"
        aborted = await asyncio.to_thread(askq, backend, "abort", "turn-X")
        assert aborted.stdout == "turn turn-X aborted; 1 pending request(s) cancelled\n"
        code, out, err = await finish(caller)
        assert (code, out) == (4, "")
        assert err.startswith("ABORTED: The user aborted this turn")
        retraction = await mem.next_retracted()
        assert (retraction.request_id, retraction.reason) == (
            offer.request_id,
            "cancelled: the turn was aborted",
        )
        # An ask for the aborted turn fails at once, from any process.
        again = await asyncio.to_thread(
            askq, backend, "ask", "--turn", "turn-X", stdin=json.dumps(SEED)
        )
        assert again.returncode == 4
        assert mem.presented.empty()


async def test_sigint_cancels_the_pending_ask(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with memory_group(backend, mem) as seam:
        caller = await start_ask(backend, stdin=json.dumps(SEED))
        offer = await mem.next_presented(timeout=20)
        caller.send_signal(signal.SIGINT)
        code, _, err = await finish(caller)
        assert code == 4 and err.startswith("ABORTED")
        settled = await seam.settlement(offer.request_id)
        assert settled is not None and settled.state == "CANCELLED"


async def test_delegated_caller_until_the_owner_process_dies(backend: Backend) -> None:
    mem = MemoryAnswerer()  # holds the parent's own question, so the parent stays alive

    async def ask_as_child() -> subprocess.CompletedProcess[str]:
        args = ("ask", "--agent", "child", "--owner", "parent")
        return await asyncio.to_thread(askq, backend, *args, stdin=json.dumps(SEED))

    async with memory_group(backend, mem, scope={"who": "parent"}):
        with worker_process(backend, "auto", "--priority", "10"):
            parent = await start_ask(
                backend, "--agent", "parent", "--scope", "who=parent", stdin=json.dumps(SEED)
            )
            await mem.next_presented(timeout=20)
            child = await ask_as_child()
            assert child.returncode == 5
            assert child.stderr.startswith("DELEGATED_CALLER: Agent 'child' is a sub-agent")
            assert "final result" in child.stderr
            parent.kill()  # SIGKILL: no goodbye, the heartbeat just stops
            await parent.wait()
            await asyncio.sleep(2.0)  # > agent_ttl (1.5 s in tests)
            restored = await ask_as_child()
            assert (restored.returncode, restored.stdout) == (0, YES_JSON + "\n")


async def test_replica_killed_after_claiming_is_finished_by_another(backend: Backend) -> None:
    async with backend.seam() as seam:
        ask = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t")))
        with worker_process(backend, "console", "--group", "humans", "--consumer", "w1") as proc:
            status = await claimed(seam)
            assert status.claimers == ["humans"]
            proc.kill()  # SIGKILL between claim and answer
            proc.wait(10)
        replica = MemoryAnswerer(reply=lambda o: YES, by="replica-2")
        started = time.monotonic()
        async with running(seam, replica, "humans", consumer="w2"):
            answers = await asyncio.wait_for(ask, 20)
        assert answers.to_json() == YES_JSON
        offer = await replica.next_presented()
        assert offer.request_id == status.id
        assert replica.decided == []  # a recovered claim is not decided again
        assert time.monotonic() - started < 10
        settled = await seam.settlement(status.id)
        assert settled is not None and settled.by == "replica-2"


async def test_restarted_replica_recovers_its_own_pending_offer(backend: Backend) -> None:
    async with backend.seam() as seam:
        ask = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t")))
        with worker_process(backend, "console", "--consumer", "stable") as proc:
            await claimed(seam)
            proc.kill()
            proc.wait(10)
        with worker_process(backend, "console", "--consumer", "stable") as again:
            assert again.stdin is not None and again.stdout is not None
            again.stdin.write("2\n")
            again.stdin.flush()
            answers = await asyncio.wait_for(ask, 20)
        assert answers.to_json() == NO_JSON


async def test_status_shows_groups_and_pending_requests(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with memory_group(backend, mem, group="web", priority=10) as seam:
        ask = asyncio.create_task(seam.ask(SEED, Caller(agent_id="agent-9", turn_id="t9")))
        await mem.next_presented()
        shown = await asyncio.to_thread(askq, backend, "status", "--json")
        status = json.loads(shown.stdout)
        assert [
            (g["name"], g["priority"], g["live_consumers"], g["pending"]) for g in status["groups"]
        ] == [("web", 10, 1, 1)]
        [request] = status["requests"]
        assert (request["state"], request["claimers"], request["agent"], request["header"]) == (
            "CLAIMED",
            ["web"],
            "agent-9",
            "Confirm",
        )
        table = await asyncio.to_thread(askq, backend, "status")
        assert "web" in table.stdout and "CLAIMED" in table.stdout
        await seam.abort_turn("t9")
        with pytest.raises(AskError) as info:
            await ask
        assert info.value.code is ErrorCode.ABORTED


def test_worker_configuration_errors(backend: Backend) -> None:
    unknown = askq(backend, "worker", "telegraph")
    assert unknown.returncode == 12
    assert unknown.stderr.startswith("CONFIG_ERROR: no answerer 'telegraph' (known: ")
    assert "auto" in unknown.stderr and "console" in unknown.stderr
    bad = askq(backend, "worker", "auto", "--policy", "sometimes")
    assert bad.returncode == 12
    assert bad.stderr.startswith("CONFIG_ERROR: auto: --policy: ")
    group = askq(backend, "worker", "auto", "--group", "no spaces")
    assert group.returncode == 12 and 'group: "no spaces" is not a group name' in group.stderr


def test_unreachable_redis_is_one_line_naming_the_url() -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"
    for args in (("status",), ("abort", "t"), ("ask", "-q", "Really?"), ("worker", "auto")):
        result = askq(None, "--redis-url", url, *args)
        assert result.returncode == 11, result.stderr
        assert result.stderr.startswith(f"REDIS_UNAVAILABLE: cannot reach Redis at {url}: ")
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_demo_runs_on_embedded_redis() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKQ_")}
    env["PYTHONPATH"] = str(ROOT)
    auto = subprocess.run(
        [*ASKQ, "demo", "--auto"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert auto.returncode == 0, auto.stderr
    assert "embedded" in auto.stdout
    assert auto.stdout.rstrip().endswith(YES_JSON)
    console = subprocess.run(
        [*ASKQ, "demo"], input="2\n", capture_output=True, text=True, timeout=60, env=env
    )
    assert console.returncode == 0, console.stderr
    assert "Proceed with the destructive cleanup?" in console.stdout
    assert console.stdout.rstrip().endswith(NO_JSON)


async def test_cli_timeout_policies_and_idempotency_key(backend: Backend) -> None:
    """`askq ask --timeout`: exit 7 (TIMED_OUT), or the recommended default marked
    defaulted; `--idempotency-key`: a second run prints the stored answer."""
    async with backend.seam() as seam, running(seam, MemoryAnswerer(), "desk"):
        loop = asyncio.get_running_loop()
        failed = await loop.run_in_executor(
            None, lambda: askq(backend, "ask", "--timeout", "0.3", stdin=json.dumps(SEED))
        )
        assert failed.returncode == 7, failed.stderr
        assert failed.stderr.startswith("TIMED_OUT: ")
        args = ["ask", "--timeout", "0.3", "--on-timeout", "default", "--idempotency-key", "k1"]
        first = await loop.run_in_executor(
            None, lambda: askq(backend, *args, stdin=json.dumps(SEED))
        )
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == YES_JSON[:-1] + ',"defaulted":true}'
        again = await loop.run_in_executor(
            None, lambda: askq(backend, *args, stdin=json.dumps(SEED))
        )
        assert again.stdout == first.stdout  # the stored settlement, nobody asked again
        bad = await loop.run_in_executor(
            None, lambda: askq(backend, "ask", "--timeout", "1", "--default", "{", stdin="{}")
        )
        assert bad.returncode == 2 and "--default" in bad.stderr
