"""The CLI as a new user (or an attacker) meets it: every failure is one `CODE: message`
line with its exit status, never a traceback; no credential is printed; agent text is
shown as data; the demo keeps to itself. Regression tests of the hardening issue
(items 7, 14, 15, 17, 18), against both backends where Redis is involved."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest
from conftest import SEED, Backend, running
from test_processes import ASKQ, askq, worker_process

from askq import AskUserQuestionTool, Caller, ErrorCode, Seam
from askq.answerers.memory import MemoryAnswerer

ESC = "\x1b"


def one_line_error(result: subprocess.CompletedProcess[str], code: str, status: int) -> str:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{code}: "), result.stderr
    return lines[0]


# --- 18. no tracebacks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "stdin", "field"),
    [
        (["-q", "Deploy?", "--owner", ""], "", "--owner"),
        (["-q", "Deploy?", "--agent", "a" * 201], "", "--agent"),
        (["-q", "Deploy?", "--turn", "t" * 201], "", "--turn"),
        (["-q", "Deploy?", "--timeout", "inf"], "", "timeout"),
        (["-q", "Deploy?", "--timeout", "1e308"], "", "timeout"),
        (["-q", "Deploy?", "--timeout", "nan"], "", "timeout"),
        ([], "[" * 5000 + "]" * 5000, "input"),
        ([], '{"questions": ' + "[" * 3000 + "]" * 3000 + "}", "input"),
        (["-q", "Deploy?", "--scope", "tenant=" + "x" * 300], "", "scope"),
    ],
)
def test_18_bad_input_is_one_line_naming_what_is_wrong(
    backend: Backend, args: list[str], stdin: str, field: str
) -> None:
    result = askq(backend, "ask", *args, stdin=stdin)
    line = one_line_error(result, "INVALID_REQUEST", 6)
    assert line.startswith(f"INVALID_REQUEST: {field}"), line


def test_18_bytes_that_are_not_utf8_are_one_line(backend: Backend) -> None:
    env = backend.env()
    for argv, stdin in (
        ([*ASKQ, "ask"], b'{"questions": "\xff"}'),
        ([*ASKQ, "ask", "-q", "Deploy?", "--idempotency-key", os.fsdecode(b"k\xff")], b""),
    ):
        result = subprocess.run(argv, input=stdin, capture_output=True, timeout=30, env=env)
        decoded = subprocess.CompletedProcess(
            result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
        )
        line = one_line_error(decoded, "INVALID_REQUEST", 6)
        assert "UTF-8" in line or "Unicode" in line, line


def test_18_a_bug_is_one_internal_line(backend: Backend) -> None:
    """Whatever escapes a command is one INTERNAL line (ASKQ_DEBUG=1 shows more)."""
    result = askq(backend, "group", "remove", "x" * 10, ASKQ_PREFIX="bad prefix")
    one_line_error(result, "CONFIG_ERROR", 12)  # a bad setting, named
    result = askq(backend, "status", ASKQ_REDIS_URL="redis://127.0.0.1:notaport/0")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr


# --- 14. no credential is printed ----------------------------------------------------


def test_14_the_redis_password_is_never_shown() -> None:
    url = "redis://alice:hunter2@127.0.0.1:1/0"
    for args in (("ask", "-q", "Deploy?"), ("status",), ("group", "list"), ("abort", "t")):
        result = askq(None, *args, ASKQ_REDIS_URL=url)
        line = one_line_error(result, "REDIS_UNAVAILABLE", 11)
        assert "hunter2" not in result.stderr + result.stdout
        assert "redis://alice:***@127.0.0.1:1/0" in line


async def test_14_the_tool_result_has_no_password() -> None:
    seam = Seam.from_url("redis://:s3cret@127.0.0.1:1/0?password=s3cret")
    result = await AskUserQuestionTool(seam).execute(SEED, Caller(agent_id="a", turn_id="t"))
    await seam.aclose()
    assert result.code is ErrorCode.REDIS_UNAVAILABLE
    assert "s3cret" not in result.content and "***" in result.content


# --- 15. agent text in `askq status` -------------------------------------------------


async def test_15_status_shows_agent_text_as_data(backend: Backend) -> None:
    nasty = {
        "questions": [
            {
                "id": "q",
                "header": "\x1b]0;pwned\x07[bold]X",
                "question": "Drop?",
                "options": [],
            }
        ]
    }
    async with backend.seam() as seam, running(seam, MemoryAnswerer(), "desk"):
        ask = asyncio.create_task(seam.ask(nasty, Caller(agent_id="ag\x1b[2J", turn_id="t")))
        await asyncio.sleep(0.3)
        shown = await asyncio.to_thread(askq, backend, "status", COLUMNS="300")
        ask.cancel()
    assert shown.returncode == 0, shown.stderr
    assert ESC not in shown.stdout and "\x07" not in shown.stdout
    assert "\\x1b]0;p" in shown.stdout and "ag\\x1b[2J" in shown.stdout
    assert "[bold]" in shown.stdout  # markup printed, not applied


# --- 17. the demo keeps to itself ----------------------------------------------------


def test_17_the_demo_ignores_askq_redis_url(backend: Backend) -> None:
    result = askq(backend, "demo", "--auto", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "embedded" in result.stdout
    assert backend.keys() == []  # nothing registered in the deployment it was pointed at


def test_17_the_demo_on_a_real_redis_leaves_nothing(backend: Backend) -> None:
    client = backend.sync_client()

    def demo_keys() -> set[str]:
        # (fakeredis lists a list emptied by a blocking pop in SCAN; EXISTS knows better)
        # The demo's prefix is demo-<8 hex digits>: a person's own `--prefix demo-…` keys
        # in the same database are not the demo's.
        keys = client.scan_iter(match="{demo-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]????}:*", count=1000)
        return {k for k in keys if client.exists(k)}

    try:
        before = demo_keys()
        result = askq(None, "demo", "--auto", "--redis-url", backend.url, timeout=60)
        assert result.returncode == 0, result.stderr
        assert '"answers"' in result.stdout
        assert demo_keys() == before
    finally:
        client.close()


# --- 7. one priority per group, from the CLI -----------------------------------------


async def test_7_a_console_with_another_priority_is_refused_and_group_remove(
    backend: Backend,
) -> None:
    with worker_process(backend, "console", "--priority", "10", "--consumer", "desk"):
        result = await asyncio.to_thread(askq, backend, "worker", "console", "--priority", "5")
        line = one_line_error(result, "CONFIG_ERROR", 12)
        assert "priority 10" in line and "askq group remove console" in line
        refused = await asyncio.to_thread(askq, backend, "group", "remove", "console")
        assert "live replica" in one_line_error(refused, "CONFIG_ERROR", 12)
        listed = await asyncio.to_thread(askq, backend, "group", "list", "--json")
        assert [(g["name"], g["priority"]) for g in json.loads(listed.stdout)] == [("console", 10)]
    # Killed: once its heartbeat has run out, removing it lets it start at 5.
    for _ in range(50):
        removed = await asyncio.to_thread(askq, backend, "group", "remove", "console")
        if removed.returncode == 0 or "live replica" not in removed.stderr:
            break
        await asyncio.sleep(0.2)
    assert removed.returncode == 0, removed.stderr
    with worker_process(backend, "console", "--priority", "5"):
        listed = await asyncio.to_thread(askq, backend, "group", "list", "--json")
        assert [(g["name"], g["priority"]) for g in json.loads(listed.stdout)] == [("console", 5)]
