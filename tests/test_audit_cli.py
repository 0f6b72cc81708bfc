"""The audit trail and `askq show` / `askq requests` / `askq audit tail`, through the
CLI as an operator runs it: real worker, sweeper and ask processes against both
backends. Also the cancellation wordings, as the caller, the trail and `show` say them."""

from __future__ import annotations

import asyncio
import json
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from conftest import Backend
from test_processes import ASKQ, askq, finish, start_ask


@contextmanager
def process(backend: Backend, *args: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    """An `askq` process (a worker, a sweeper), returned once it says it is ready."""
    proc = subprocess.Popen(
        [*ASKQ, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(**env),
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 20)
        assert ready, f"{args} did not start within 20 s"
        line = proc.stderr.readline()
        assert "ready" in line, line + proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream:
                stream.close()


def lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's stdout, line by line, as it comes (a thread reads it: a buffered
    reader may hold several lines that select() no longer sees)."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            found.put(line)

    threading.Thread(target=read, daemon=True).start()
    return found


def shown(backend: Backend, request_id: str) -> dict[str, Any]:
    result = askq(backend, "show", request_id, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def listed(backend: Backend, *filters: str) -> list[dict[str, Any]]:
    result = askq(backend, "requests", "--json", *filters)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


async def until(probe: Any, what: str, within: float = 20) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(probe)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {within} s")


def events(detail: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(e["e"], e.get("tier"), e.get("group") or e.get("groups")) for e in detail["timeline"]]


async def test_timeline_of_a_request_that_fell_through_two_tiers_was_reminded_and_answered(
    backend: Backend,
) -> None:
    """Tier 0 declines (rules), tier 5 is wedged (a replica stopped with SIGSTOP: live
    but deciding nothing) and misses its decision window, tier 10 (a console) accepts,
    is reminded, and its human answers."""
    with ExitStack() as stack:
        stack.enter_context(process(backend, "sweeper"))
        stack.enter_context(
            process(backend, "worker", "auto", "--policy", "decline", "--group", "rules")
        )
        wedged = stack.enter_context(
            process(
                backend,
                *("worker", "auto", "--group", "wedged", "--priority", "5"),
                *("--decision-window", "0.5"),
                ASKQ_CONSUMER_TTL="60",  # live throughout, though it does nothing
            )
        )
        wedged.send_signal(signal.SIGSTOP)
        desk = stack.enter_context(
            process(
                backend,
                *("worker", "console", "--group", "desk", "--priority", "10"),
                *("--by", "alice", "--remind-after", "0.5", "--decision-window", "5"),
            )
        )
        ask = await start_ask(
            backend, "-q", "Deploy?", "-o", "Ship it (Recommended)", "-o", "Wait",
            "--agent", "agent-7", "--turn", "turn-7", "--scope", "tenant=acme",
        )  # fmt: skip
        [row] = await until(lambda: listed(backend, "--turn", "turn-7"), "the ask listed")
        request_id = row["id"]
        assert (row["agent"], row["header"]) == ("agent-7", "Question")

        def reminded() -> bool:
            return any(e["e"] == "reminded" for e in shown(backend, request_id)["timeline"])

        await until(reminded, "the reminder")
        assert desk.stdin is not None
        desk.stdin.write("1\n")
        desk.stdin.flush()
        status, out, err = await finish(ask)
        assert (status, out) == (
            0,
            '{"answers":[{"id":"q1","selected":["Ship it (Recommended)"]}]}\n',
        ), err

    detail = shown(backend, request_id)
    assert events(detail) == [
        ("asked", None, None),
        ("offered", 0, "rules"),
        ("declined", 0, "rules"),
        ("offered", 5, "wedged"),
        ("window_missed", 5, "wedged"),
        ("offered", 10, "desk"),
        ("accepted", 10, "desk"),
        ("reminded", 10, "desk"),
        ("answered", None, "desk"),
    ]
    timeline = detail["timeline"]
    times = [e["t"] for e in timeline]
    assert times == sorted(times)
    assert (detail["agent"], detail["turn"]) == ("agent-7", "turn-7")
    assert timeline[-1]["by"] == "alice"
    window = times[4] - times[3]
    assert window >= 500, window  # the window ran its course (the sweeper fired it)
    assert times[7] - times[6] >= 500  # reminded after --remind-after
    assert (detail["state"], detail["by"], detail["scope"]) == (
        "ANSWERED",
        "alice",
        {"tenant": "acme"},
    )
    assert detail["answers"] == [
        {"id": "q1", "selected": ["Ship it (Recommended)"], "custom": None}
    ]
    assert detail["settled_ms"] == times[-1]

    text = askq(backend, "show", request_id)
    assert text.returncode == 0, text.stderr
    for line in (
        f"request  {request_id}",
        "state    ANSWERED by alice through desk",
        "caller   agent agent-7, turn turn-7",
        "scope    tenant=acme",
        "offered to tier 5: wedged",
        "wedged missed its decision window (tier 5)",
        "desk reminded its humans (tier 10)",
        "answered by alice through desk",
        "q1: Ship it (Recommended)",
    ):
        assert line in text.stdout, (line, text.stdout)

    # requests: filters by group, state, agent, turn
    assert [r["id"] for r in listed(backend, "--group", "wedged")] == [request_id]
    assert [r["id"] for r in listed(backend, "--state", "answered")] == [request_id]
    assert listed(backend, "--state", "pending") == []
    assert listed(backend, "--agent", "someone-else") == []
    assert listed(backend, "--group", "nobody") == []
    [row] = listed(backend, "--agent", "agent-7", "--state", "settled")
    assert (row["groups"], row["by"], row["state"]) == (
        ["rules", "wedged", "desk"],
        "alice",
        "ANSWERED",
    )
    table = askq(backend, "requests", COLUMNS="80")
    # the full id, starting its row, at 80 columns
    assert any(line.startswith(f"{request_id} ") for line in table.stdout.splitlines())


async def test_cancellations_say_what_happened(backend: Backend) -> None:
    """Withdrawn by the caller (Ctrl-C), the turn aborted, the ask timed out: each in
    the caller's error line, the trail, `show` and the retraction a channel shows."""
    from conftest import running

    from askq.answerers.memory import MemoryAnswerer

    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "desk"):
        # the turn was aborted
        ask = await start_ask(backend, "-q", "Deploy?", "--turn", "turn-a")
        await mem.next_presented()
        aborted = await asyncio.to_thread(askq, backend, "abort", "turn-a")
        assert aborted.returncode == 0, aborted.stderr
        status, _, err = await finish(ask)
        assert status == 4 and err.startswith("ABORTED: The user aborted this turn"), err
        assert (await mem.next_retracted()).reason == "cancelled: the turn was aborted"

        # the caller withdrew (Ctrl-C)
        ask = await start_ask(backend, "-q", "Deploy?", "--turn", "turn-w")
        await mem.next_presented()
        ask.send_signal(signal.SIGINT)
        status, _, err = await finish(ask)
        assert status == 4 and err.startswith("ABORTED: This call was cancelled"), err
        assert (await mem.next_retracted()).reason == "cancelled: the caller withdrew the question"

        # the ask timed out
        ask = await start_ask(backend, "-q", "Deploy?", "--turn", "turn-t", "--timeout", "0.5")
        await mem.next_presented()
        status, _, err = await finish(ask)
        assert status == 7 and err.startswith("TIMED_OUT: Nobody answered"), err
        assert (await mem.next_retracted()).reason == "cancelled: the ask timed out"

    # the caller is gone: its process was killed; the sweeper withdraws its ask once
    # its heartbeat lapses
    with process(backend, "sweeper", ASKQ_SWEEP_INTERVAL="1"):
        async with backend.seam() as seam, running(seam, mem, "desk"):
            ask = await asyncio.create_subprocess_exec(
                *ASKQ, "ask", "-q", "Deploy?", "--turn", "turn-g",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=backend.env(ASKQ_CALLER_TTL="1"),
            )  # fmt: skip
            await mem.next_presented()
            ask.kill()
            await ask.communicate()
            retracted = await asyncio.wait_for(mem.next_retracted(), 20)
            assert retracted.reason == "cancelled: the caller is gone"

    rows = {r["turn"]: r for r in listed(backend, "--state", "cancelled")}
    assert {turn: (r["code"], r["reason"]) for turn, r in rows.items()} == {
        "turn-a": ("ABORTED", "turn aborted"),
        "turn-w": ("ABORTED", "withdrawn"),
        "turn-t": ("TIMED_OUT", "timed out"),
        "turn-g": ("ABORTED", "caller gone"),
    }
    for turn, words in (
        ("turn-a", "CANCELLED (ABORTED): the turn was aborted"),
        ("turn-w", "CANCELLED (ABORTED): the caller withdrew the question"),
        ("turn-t", "CANCELLED (TIMED_OUT): the ask timed out"),
        ("turn-g", "CANCELLED (ABORTED): the caller is gone"),
    ):
        text = askq(backend, "show", rows[turn]["id"])
        assert f"state    {words}" in text.stdout, text.stdout
        last = shown(backend, rows[turn]["id"])["timeline"][-1]
        assert last["e"] == ("timed_out" if turn == "turn-t" else "cancelled")


async def test_audit_stream_tail_and_show_of_what_is_not_there(backend: Backend) -> None:
    """With ASKQ_AUDIT_STREAM_MAXLEN set, every entry also goes to the capped stream
    that `askq audit tail` prints (JSON lines with --jsonl); without, nothing does."""
    empty = askq(backend, "audit", "tail", "--jsonl")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert "audit stream is empty" in empty.stderr
    env = {"ASKQ_AUDIT_STREAM_MAXLEN": "1000"}
    with process(backend, "worker", "auto", "--group", "rules", **env):
        result = askq(
            backend, "ask", "-q", "Deploy?", "-o", "Yes (Recommended)", "--turn", "t1", **env
        )
        assert result.returncode == 0, result.stderr
    tail = askq(backend, "audit", "tail", "--jsonl")
    entries = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [e["e"] for e in entries] == ["asked", "offered", "answered"]
    assert entries[-1]["by"].startswith("auto:") and entries[-1]["group"] == "rules"
    [row] = listed(backend, "--turn", "t1")
    assert {e["request"] for e in entries} == {row["id"]}
    assert [e["e"] for e in shown(backend, row["id"])["timeline"]] == [
        "asked",
        "offered",
        "answered",
    ]
    human = askq(backend, "audit", "tail", "-n", "1")
    assert human.stdout.count("\n") == 1 and "through rules" in human.stdout

    # -f: each new entry as it is written, until Ctrl-C
    follow = subprocess.Popen(
        [*ASKQ, "audit", "tail", "-f", "--jsonl", "-n", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(),
    )
    output = lines_of(follow)
    try:
        first = output.get(timeout=20)
        assert json.loads(first)["e"] == "answered"  # the last one there: it is reading
        with process(backend, "worker", "auto", "--group", "rules", **env):
            result = askq(backend, "ask", "-q", "Again?", "-o", "Yes", "--turn", "t2", **env)
            assert result.returncode == 0, result.stderr
        followed = [json.loads(output.get(timeout=20))["e"] for _ in range(3)]
        assert followed == ["asked", "offered", "answered"]
        follow.send_signal(signal.SIGINT)
        assert follow.wait(10) == 0
        assert "Traceback" not in (follow.stderr.read() if follow.stderr else "")
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(10)

    missing = askq(backend, "show", "0" * 32)
    assert missing.returncode != 0 and missing.stderr.startswith("NOT_FOUND: no request")
    bad = askq(backend, "show", "not an id")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
