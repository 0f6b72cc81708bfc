"""The CLI talks to the person using it (issue 15, item 6), through `askq` subprocesses
as a user runs them: the line `askq ask` prints while it waits on a terminal (and not
otherwise), the operator's hint after NO_ANSWERER, global options on either side of
the command, one-line URL errors, worker flags (typos, --help), --version, abort's
messages, the sweep interval check, the timeout default notice, --default's shape,
and the log lines of a worker and a sweeper at -v."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import shlex
import subprocess
import sys
import time
from typing import Any

import pytest
from conftest import REAL_URL, ROOT, Backend, running
from test_cli_errors import one_line_error
from test_processes import ASKQ, askq

from askq import Seam
from askq.answerers.memory import MemoryAnswerer

QUESTION = ["-q", "Deploy now?", "-o", "Yes", "-o", "No"]


def _popen_ask(backend: Backend, *args: str, stderr: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ASKQ, "ask", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=backend.env(),
    )


def _read_pty(fd: int, until: str, timeout: float = 20) -> str:
    out = ""
    deadline = time.monotonic() + timeout
    while until not in out and time.monotonic() < deadline:
        import select

        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                out += os.read(fd, 4096).decode(errors="replace")
            except OSError:
                break
    return out


# --- askq ask: the waiting line ------------------------------------------------------


async def test_ask_on_a_terminal_says_what_it_waits_for_and_how_to_cancel(
    backend: Backend, seam: Seam
) -> None:
    """On a terminal: one line naming the request, the turn, Ctrl-C and the abort
    command; that command, run as printed, cancels the ask."""
    memory = MemoryAnswerer()
    async with running(seam, memory, "desk"):
        leader, follower = pty.openpty()
        try:
            proc = _popen_ask(backend, *QUESTION, "--turn", "turn-42", stderr=follower)
            offer = await memory.next_presented(timeout=20)
            line = await asyncio.to_thread(_read_pty, leader, "from another shell")
        finally:
            os.close(follower)
        assert offer.request_id in line and "turn turn-42" in line and "Ctrl-C" in line, line
        command = re.search(r"`(askq abort [^`]+)`", line)
        assert command is not None, line
        printed = shlex.split(command.group(1))
        assert printed == ["askq", "abort", "turn-42", "--prefix", backend.prefix]
        # Run as printed, from a shell that has only the Redis URL set.
        env = {k: v for k, v in backend.env().items() if k != "ASKQ_PREFIX"}
        aborted = await asyncio.to_thread(
            subprocess.run, [*ASKQ, *printed[1:]], capture_output=True, text=True, env=env
        )
        assert "1 pending request(s) cancelled" in aborted.stdout, aborted.stderr
        out, _ = await asyncio.to_thread(proc.communicate, timeout=20)
        os.close(leader)
        assert proc.returncode == 4 and out == ""


async def test_ask_not_on_a_terminal_prints_only_the_json(backend: Backend, seam: Seam) -> None:
    memory = MemoryAnswerer(reply=lambda offer: [{"id": "q1", "selected": ["Yes"]}])
    async with running(seam, memory, "desk"):
        result = await asyncio.to_thread(askq, backend, "ask", *QUESTION)
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"answers":[{"id":"q1","selected":["Yes"]}]}\n'
    assert result.stderr == ""


# --- NO_ANSWERER: the operator's hint ------------------------------------------------


def test_global_options_after_ask_and_worker(backend: Backend) -> None:
    env = {k: v for k, v in backend.env().items() if k not in ("ASKQ_REDIS_URL", "ASKQ_PREFIX")}
    flags = ["--redis-url", backend.url, "--prefix", backend.prefix]
    worker = subprocess.Popen(
        [*ASKQ, "worker", "auto", *flags],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert worker.stderr is not None
        assert worker.stderr.readline().endswith(": ready\n")
        result = subprocess.run(
            [*ASKQ, "ask", "-q", "Go?", "-o", "Yes", *flags],
            capture_output=True,
            text=True,
            env=env,
        )
        assert result.stdout == '{"answers":[{"id":"q1","selected":["Yes"]}]}\n', result.stderr
    finally:
        worker.terminate()
        worker.communicate(timeout=20)


def test_no_answerer_adds_a_hint_for_the_operator(backend: Backend) -> None:
    result = askq(backend, "ask", *QUESTION)
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("NO_ANSWERER: "), result.stderr
    assert "hint" not in lines[0]  # the model's message stays as it is
    assert f"no answerer group is live under prefix '{backend.prefix}'" in lines[1]
    assert "askq worker console" not in lines[1]  # the prefix is not the default one
    assert f"askq --prefix {backend.prefix} worker console" in lines[1]
    assert result.stdout == ""


async def test_no_answerer_with_live_groups_names_them(backend: Backend, seam: Seam) -> None:
    async with running(seam, MemoryAnswerer(accept=False), "picky"):
        result = await asyncio.to_thread(askq, backend, "ask", *QUESTION)
    assert result.returncode == 3
    hint = result.stderr.splitlines()[1]
    assert "1 answerer group(s) live" in hint and "(picky)" in hint, hint


# --- global options, URLs ------------------------------------------------------------


async def test_prefix_and_redis_url_work_before_or_after_the_command(
    backend: Backend, seam: Seam
) -> None:
    env = {k: v for k, v in backend.env().items() if k not in ("ASKQ_REDIS_URL", "ASKQ_PREFIX")}
    flags = ["--redis-url", backend.url, "--prefix", backend.prefix]
    async with running(seam, MemoryAnswerer(), "desk"):
        for argv in (
            [*flags, "group", "list", "--json"],
            ["group", "list", "--json", *flags],
            ["group", *flags, "list", "--json"],
            [
                "--prefix",
                "elsewhere",
                "group",
                "list",
                "--json",
                "--redis-url",
                backend.url,
                "--prefix",
                backend.prefix,
            ],
        ):
            result = await asyncio.to_thread(
                subprocess.run, [*ASKQ, *argv], capture_output=True, text=True, env=env
            )
            assert result.returncode == 0, (argv, result.stderr)
            assert [g["name"] for g in json.loads(result.stdout)] == ["desk"], argv
        other = await asyncio.to_thread(
            subprocess.run,
            [*ASKQ, "group", "list", "--json", "--redis-url", backend.url, "--prefix", "nobody"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert json.loads(other.stdout) == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "scheme"),
        ("redis://127.0.0.1:abc/0", "Port"),
        ("redis://127.0.0.1:6379/abc", "database 'abc' is not a number"),
        ("redis://127.0.0.1:99999/0", "Port out of range"),
    ],
)
def test_a_malformed_url_is_one_config_error_line(url: str, says: str) -> None:
    for before in (True, False):
        args = ["--redis-url", url, "status"] if before else ["status", "--redis-url", url]
        line = one_line_error(askq(None, *args), "CONFIG_ERROR", 12)
        assert line.startswith("CONFIG_ERROR: --redis-url / ASKQ_REDIS_URL: ") and says in line
    line = one_line_error(askq(None, "status", ASKQ_REDIS_URL=url), "CONFIG_ERROR", 12)
    assert says in line, line


def test_a_database_out_of_range_is_one_redis_unavailable_line(real_url: str) -> None:
    url = REAL_URL.rsplit("/", 1)[0] + "/99999"
    line = one_line_error(askq(None, "abort", "t", "--redis-url", url), "REDIS_UNAVAILABLE", 11)
    assert "DB index is out of range" in line, line


def test_version() -> None:
    from importlib.metadata import version

    result = askq(None, "--version")
    assert result.returncode == 0 and result.stdout == f"askq {version('askq')}\n"


# --- askq worker KIND: flags ---------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "closest"),
    [("--polcy", "--policy"), ("--rule", "--rules"), ("--priorty", "--priority")],
)
def test_a_mistyped_worker_flag_is_named_with_the_closest(
    backend: Backend, typo: str, closest: str
) -> None:
    line = one_line_error(askq(backend, "worker", "auto", typo, "1"), "CONFIG_ERROR", 12)
    assert f"no option {typo}; did you mean {closest}?" in line, line


def test_a_worker_option_before_the_kind_says_where_it_goes() -> None:
    line = one_line_error(askq(None, "worker", "--priority", "3", "auto"), "CONFIG_ERROR", 12)
    assert "--priority goes after the kind (`askq worker KIND --priority ...`" in line, line


def test_worker_kind_help_lists_its_options_with_choices_and_defaults() -> None:
    result = askq(None, "worker", "auto", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "Options of auto:" in text and "Group options:" in text
    assert "--policy recommended|first|decline" in text
    assert "[default: recommended]" in text and "--rules TEXT" in text
    assert "--priority INTEGER" in text and "--metrics-port" in text
    kinds = askq(None, "worker", "--help")
    assert all(kind in kinds.stdout for kind in ("auto", "console", "slack"))


# --- askq abort ----------------------------------------------------------------------


async def test_abort_messages(backend: Backend, seam: Seam) -> None:
    empty = askq(backend, "abort", " ")
    assert "turn: empty" in one_line_error(empty, "INVALID_REQUEST", 6)
    unknown = askq(backend, "abort", "never-asked")
    assert unknown.returncode == 0
    assert f"no pending asks of it are known under prefix '{backend.prefix}'" in unknown.stdout
    again = askq(backend, "abort", "never-asked")
    assert "was already aborted" in again.stdout, again.stdout
    async with running(seam, MemoryAnswerer(), "desk"):
        proc = _popen_ask(backend, *QUESTION, "--turn", "t-live", stderr=subprocess.PIPE)
        for _ in range(100):
            if (await seam.status()).requests:
                break
            await asyncio.sleep(0.1)
        done = await asyncio.to_thread(askq, backend, "abort", "t-live")
        assert done.stdout == "turn t-live aborted; 1 pending request(s) cancelled\n"
        await asyncio.to_thread(proc.communicate, timeout=20)
        assert proc.returncode == 4


# --- settings refused at start-up ----------------------------------------------------


@pytest.mark.parametrize("interval", ["7", "0.5", "45"])
def test_a_sweep_interval_the_cron_cannot_run_is_refused(backend: Backend, interval: str) -> None:
    result = askq(backend, "sweeper", ASKQ_SWEEP_INTERVAL=interval)
    line = one_line_error(result, "CONFIG_ERROR", 12)
    assert f"ASKQ_SWEEP_INTERVAL {interval}" in line and "1, 2, 3, 4, 5, 6, 10" in line, line


# --- --on-timeout default, --default -------------------------------------------------


async def test_on_timeout_default_says_which_option_it_will_pick(
    backend: Backend, seam: Seam
) -> None:
    async with running(seam, MemoryAnswerer(), "desk"):
        result = await asyncio.to_thread(
            askq, backend, "ask", *QUESTION, "--timeout", "0.5", "--on-timeout", "default"
        )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["answers"] == [{"id": "q1", "selected": ["Yes"]}]
    assert json.loads(result.stdout)["defaulted"] is True
    notice = result.stderr.strip()
    assert 'question "q1" will be answered "Yes"' in notice and "Recommended" in notice, notice


def test_default_errors_show_the_expected_shape(backend: Backend) -> None:
    wrong = askq(
        backend,
        "ask",
        *QUESTION,
        "--timeout",
        "5",
        "--on-timeout",
        "default",
        "--default",
        '[{"id": "q2", "selected": ["Yes"]}]',
    )
    line = one_line_error(wrong, "INVALID_REQUEST", 6)
    assert 'no question with id "q2"' in line
    assert 'expected a list of answers like [{"id": "q1", "selected": ["Yes"]}]' in line, line
    not_json = askq(backend, "ask", *QUESTION, "--default", "{yes}")
    assert not_json.returncode == 2 and '[{"id": "q1", "selected": ["Yes"]}]' in not_json.stderr


# --- log lines at -v -----------------------------------------------------------------


def _start(backend: Backend, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*ASKQ, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(),
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.rstrip().endswith("ready") or "ready" in line, line
    return proc


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    return err


def test_a_worker_logs_each_decision_and_settlement_at_v_as_json(backend: Backend) -> None:
    proc = _start(backend, "worker", "auto", "-v", "--log-format", "json")
    try:
        answered = [askq(backend, "ask", *QUESTION) for _ in range(2)]
    finally:
        err = _stop(proc)
    assert all(r.returncode == 0 for r in answered), [r.stderr for r in answered]
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    decisions = [e for e in events if e.get("event") == "decision"]
    settlements = [e for e in events if e.get("event") == "settlement"]
    assert [e["decision"] for e in decisions] == ["answered", "answered"], err
    assert [e["outcome"] for e in settlements] == ["answered", "answered"], err
    assert {e["group"] for e in decisions} == {"auto"} and all(e["request"] for e in decisions)
    quiet = _start(backend, "worker", "auto", "--group", "quiet")
    try:
        askq(backend, "ask", *QUESTION)
    finally:
        assert "answered" not in _stop(quiet)  # not at the default level


async def test_the_sweeper_logs_what_it_fired(backend: Backend, seam: Seam) -> None:
    proc = await asyncio.to_thread(_start, backend, "sweeper", "-v")
    try:
        async with running(seam, MemoryAnswerer(), "desk", remind_after=0.2):
            ask = await asyncio.to_thread(
                _popen_ask, backend, *QUESTION, "--timeout", "1", stderr=subprocess.DEVNULL
            )
            await asyncio.to_thread(ask.communicate, timeout=20)
    finally:
        err = await asyncio.to_thread(_stop, proc)
    assert re.search(
        r"fired remind of [0-9a-f]{32} for group desk \(now CLAIMED\), \d+ ms late", err
    ), err


def test_python_m_askq_is_the_same_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "askq", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "--redis-url" in result.stdout and "completion" in result.stdout.lower()


def test_the_readme_points_only_inside_the_repository() -> None:
    """Every relative link of the README names a file of the repository; no reference
    to files outside it (the design notes the project was built from)."""
    readme = (ROOT / "README.md").read_text()
    assert "DESIGN.md" not in readme and "../" not in readme and "shared/" not in readme
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), target
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
