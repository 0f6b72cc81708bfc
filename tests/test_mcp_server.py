"""`askq mcp` driven by the `mcp` SDK's own client, over stdio and streamable HTTP (a
real uvicorn), in both protocol eras the SDK speaks (2025-11-25, 2026-07-28)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from conftest import ROOT, SEED, YES_JSON, Backend, running
from mcp import Client
from mcp_servers import ERAS, TRANSPORTS, client_factory, http_server, mcp_client, mcp_env
from test_processes import worker_process
from two_runs import asked_apart

from askq import Seam, input_schema
from askq.answerers.memory import MemoryAnswerer

pytest.importorskip("mcp")

NO_JSON = '{"answers":[{"id":"cleanup","selected":["No, keep them"]}]}'
NO = [{"id": "cleanup", "selected": ["No, keep them"]}]


def text(result: Any) -> str:
    (block,) = result.content
    return str(block.text)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_answered_by_an_auto_worker_returns_the_exact_json(
    backend: Backend, transport: str, era: str
) -> None:
    with worker_process(backend, "auto"):
        async with mcp_client(backend, transport, era) as client:
            (tool,) = (await client.list_tools()).tools
            assert tool.name == "ask_user_question"
            # The same schema; its key order on the wire is the SDK's (per-era models
            # put `properties` first), the same on every call.
            assert tool.input_schema == input_schema()
            result = await client.call_tool("ask_user_question", SEED)
            assert (result.is_error, text(result)) == (False, YES_JSON)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_progress_arrives_while_the_human_is_slow(
    backend: Backend, seam: Seam, transport: str, era: str
) -> None:
    mem = MemoryAnswerer()
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with running(seam, mem, "humans"), mcp_client(backend, transport, era) as client:
        call = asyncio.ensure_future(
            client.call_tool("ask_user_question", SEED, progress_callback=progress)
        )
        offer = await mem.next_presented(20)
        while len(seen) < 3:  # progress every 0.2 s while nobody answers
            await asyncio.sleep(0.05)
        await mem.answer(offer.request_id, NO)
        result = await asyncio.wait_for(call, 20)
    assert (result.is_error, text(result)) == (False, NO_JSON)
    assert seen == sorted(set(seen)), seen  # strictly increasing


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_cancellation_withdraws_the_question(
    backend: Backend, seam: Seam, transport: str, era: str
) -> None:
    """notifications/cancelled withdraws at once (the grace a dropped call gets is set
    to a minute here, so only the explicit path can withdraw it in time); on 2026-era
    HTTP the cancellation is closing the response stream, withdrawn after the grace."""
    mem = MemoryAnswerer()
    dropped = transport == "http" and era == "2026-07-28"
    env = {"ASKQ_MCP_REATTACH_GRACE": "1" if dropped else "60"}
    async with (
        running(seam, mem, "humans"),
        mcp_client(backend, transport, era, env=env) as client,
    ):
        call = asyncio.ensure_future(client.call_tool("ask_user_question", SEED))
        offer = await mem.next_presented(20)
        call.cancel()
        retraction = await mem.next_retracted(20)
        assert retraction.request_id == offer.request_id
        settlement = await seam.settlement(offer.request_id)
        assert settlement is not None and settlement.state == "CANCELLED"
        # The connection lives on: the same question asked again is asked anew.
        again = asyncio.ensure_future(client.call_tool("ask_user_question", SEED))
        second = await mem.next_presented(20)
        assert second.request_id != offer.request_id
        await mem.answer(second.request_id, NO)
        assert text(await asyncio.wait_for(again, 20)) == NO_JSON


async def test_a_call_reissued_after_a_dropped_stream_reattaches(
    backend: Backend, seam: Seam
) -> None:
    """2026-era HTTP: the stream drops (the client closes it), the client re-issues the
    call under a new JSON-RPC id within the grace period: same request, asked once."""
    mem = MemoryAnswerer()
    meta = {"io.askq/turn": f"turn-{uuid.uuid4().hex}"}  # 2026 has no session: the run
    async with running(seam, mem, "humans"), mcp_client(backend, "http", "2026-07-28") as client:
        first = asyncio.ensure_future(client.call_tool("ask_user_question", SEED, meta=meta))
        offer = await mem.next_presented(20)
        first.cancel()
        await asyncio.sleep(0.2)
        again = asyncio.ensure_future(client.call_tool("ask_user_question", SEED, meta=meta))
        await asyncio.sleep(1.5)  # past the grace: the first call's withdrawal was called off
        assert mem.presented.empty() and mem.retracted.empty()
        await mem.answer(offer.request_id, NO)
        assert text(await asyncio.wait_for(again, 20)) == NO_JSON
        # Answered and delivered: the same arguments now ask a new question.
        third = asyncio.ensure_future(client.call_tool("ask_user_question", SEED, meta=meta))
        assert (await mem.next_presented(20)).request_id != offer.request_id
        third.cancel()


async def test_a_reissued_call_reattaches_on_another_replica(backend: Backend, seam: Seam) -> None:
    """Two HTTP replicas: the call drops on one, is re-issued on the other; the first
    replica's grace ends without withdrawing it (the re-issue took it over)."""
    mem = MemoryAnswerer()
    async with running(seam, mem, "humans"):
        async with http_server(backend) as url_a, http_server(backend) as url_b:
            async with Client(url_a, mode="2026-07-28") as a, Client(url_b, mode="2026-07-28") as b:
                meta = {"io.askq/turn": "turn-replicas"}
                first = asyncio.ensure_future(a.call_tool("ask_user_question", SEED, meta=meta))
                offer = await mem.next_presented(20)
                first.cancel()
                again = asyncio.ensure_future(b.call_tool("ask_user_question", SEED, meta=meta))
                await asyncio.sleep(1.5)
                assert mem.presented.empty() and mem.retracted.empty()
                await mem.answer(offer.request_id, NO)
                assert text(await asyncio.wait_for(again, 20)) == NO_JSON


@pytest.mark.parametrize("era", ERAS)
async def test_a_session_that_ends_withdraws_its_questions(
    backend: Backend, seam: Seam, era: str
) -> None:
    mem = MemoryAnswerer()
    async with running(seam, mem, "humans"):
        async with mcp_client(backend, "stdio", era) as client:
            call = asyncio.ensure_future(client.call_tool("ask_user_question", SEED))
            offer = await mem.next_presented(20)
        call.cancel()
        retraction = await mem.next_retracted(20)
        assert retraction.request_id == offer.request_id


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_askq_abort_reaches_the_turn_the_client_names(
    backend: Backend, seam: Seam, transport: str, era: str
) -> None:
    mem = MemoryAnswerer()
    meta = {"io.askq/turn": f"turn-{transport}-{era}"}
    async with running(seam, mem, "humans"), mcp_client(backend, transport, era) as client:
        call = asyncio.ensure_future(client.call_tool("ask_user_question", SEED, meta=meta))
        offer = await mem.next_presented(20)
        assert offer.caller.turn_id == meta["io.askq/turn"]
        aborted = subprocess.run(
            [sys.executable, "-m", "askq", "abort", meta["io.askq/turn"]],
            capture_output=True,
            text=True,
            timeout=30,
            env=backend.env(),
        )
        assert aborted.returncode == 0, aborted.stderr
        result = await asyncio.wait_for(call, 20)
        assert result.is_error and text(result).startswith("ABORTED: ")
        assert (await mem.next_retracted(20)).request_id == offer.request_id


async def test_the_session_is_the_turn_by_default(backend: Backend, seam: Seam) -> None:
    mem = MemoryAnswerer()
    env = {"ASKQ_MCP_SCOPE": '{"tenant":"acme"}'}
    async with (
        running(seam, mem, "humans"),
        mcp_client(backend, "http", "legacy", env=env) as client,
    ):
        call = asyncio.ensure_future(client.call_tool("ask_user_question", SEED))
        offer = await mem.next_presented(20)
        assert offer.caller.agent_id == "mcp" and offer.scope == {"tenant": "acme"}
        assert offer.caller.turn_id.startswith("mcp-session-")
        await seam.abort_turn(offer.caller.turn_id)
        assert text(await asyncio.wait_for(call, 20)).startswith("ABORTED: ")


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_askq_errors_are_tool_errors_the_model_reads(
    backend: Backend, seam: Seam, transport: str, era: str
) -> None:
    # No answerer group at all: NO_ANSWERER.
    async with mcp_client(backend, transport, era) as client:
        result = await client.call_tool("ask_user_question", SEED)
        assert result.is_error and text(result).startswith("NO_ANSWERER: ")
        bad = {"questions": [{"id": "x", "header": "H", "question": "Q?", "options": [1]}]}
        result = await client.call_tool("ask_user_question", bad)
        assert result.is_error and text(result).startswith("INVALID_REQUEST: questions[0].")
    # A child whose owner is live: DELEGATED_CALLER, with the advice for the model.
    async with seam.agent("boss"), running(seam, MemoryAnswerer(), "humans"):
        env = {"ASKQ_MCP_AGENT_ID": "helper", "ASKQ_MCP_OWNER": "boss"}
        async with mcp_client(backend, transport, era, env=env) as client:
            result = await client.call_tool("ask_user_question", SEED)
            assert result.is_error and text(result).startswith("DELEGATED_CALLER: ")


@pytest.mark.parametrize("era", ERAS)
async def test_handle_mode(backend: Backend, seam: Seam, era: str) -> None:
    """ask_user_question returns a handle at once; get_user_answer waits up to its bound
    and says "pending", then returns the exact JSON; another replica can be polled."""
    mem = MemoryAnswerer()
    env = {"ASKQ_MCP_HANDLE_MODE": "true", "ASKQ_MCP_FIRST_WAIT": "0.2"}
    async with running(seam, mem, "humans"):
        async with http_server(backend, **env) as url_a, http_server(backend, **env) as url_b:
            async with Client(url_a, mode=era) as a, Client(url_b, mode=era) as b:
                names = {t.name for t in (await a.list_tools()).tools}
                assert names == {"ask_user_question", "get_user_answer"}
                started = json.loads(text(await a.call_tool("ask_user_question", SEED)))
                assert started["status"] == "pending"
                handle = started["handle"]
                offer = await mem.next_presented(20)
                poll = await b.call_tool("get_user_answer", {"handle": handle, "wait_seconds": 0.3})
                assert json.loads(text(poll))["status"] == "pending"
                waiting = asyncio.ensure_future(
                    b.call_tool("get_user_answer", {"handle": handle, "wait_seconds": 20})
                )
                await asyncio.sleep(0.3)
                await mem.answer(offer.request_id, NO)
                assert text(await asyncio.wait_for(waiting, 20)) == NO_JSON
                again = await a.call_tool("get_user_answer", {"handle": handle})
                assert text(again) == NO_JSON
                assert mem.presented.empty()  # asked once
                unknown = await a.call_tool("get_user_answer", {"handle": "0" * 32})
                assert unknown.is_error and text(unknown).startswith("NOT_FOUND: ")
                # An immediate outcome comes back directly, not through a handle.
                bad = await a.call_tool("ask_user_question", {"questions": []})
                assert bad.is_error and text(bad).startswith("INVALID_REQUEST: ")


def test_askq_mcp_without_the_extra_says_what_to_install(tmp_path: Any) -> None:
    """The core never imports mcp: without the SDK, `askq mcp` is one CONFIG_ERROR line."""
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError('no', name='mcp')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    result = subprocess.run(
        [sys.executable, "-m", "askq", "mcp"], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.returncode != 0
    assert result.stderr.startswith("CONFIG_ERROR: askq mcp needs the mcp extra"), result.stderr


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


@pytest.mark.parametrize("stdin", ["open", "closed"])
async def test_a_stdio_server_stopped_by_sigterm_withdraws_what_it_waits_on(
    backend: Backend, seam: Seam, stdin: str
) -> None:
    """Raw JSON-RPC over the pipe (the 2025 handshake), then SIGTERM while the call
    waits: the question is retracted and the server exits 0. Also when its client went
    away first (stdin closed) and the server keeps the dropped call for the grace (a
    minute here): SIGTERM ends the grace (the SDK's client sends it 2 s after closing
    stdin)."""
    mem = MemoryAnswerer()
    async with running(seam, mem, "humans"):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "askq",
            "mcp",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=mcp_env(backend, ASKQ_MCP_REATTACH_GRACE="60"),
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}}
            init["clientInfo"] = {"name": "raw", "version": "1"}
            proc.stdin.write(
                _line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            )
            reply = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            assert reply["result"]["protocolVersion"] == "2025-11-25"
            proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            call = {"name": "ask_user_question", "arguments": SEED}
            proc.stdin.write(
                _line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            )
            offer = await mem.next_presented(20)
            if stdin == "closed":
                proc.stdin.close()
                await asyncio.sleep(0.5)
                assert mem.retracted.empty() and proc.returncode is None  # in its grace
            proc.terminate()
            assert (await mem.next_retracted(20)).request_id == offer.request_id
            assert await asyncio.wait_for(proc.wait(), 20) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("ASKQ_MCP_PROGRESS_INTERVAL", "0", "greater than 0"),
        ("ASKQ_MCP_SCOPE", "tenant=acme", "not JSON"),
        ("ASKQ_MCP_SCOPE", '{"a b": "x"}', 'scope["a b"]'),
    ],
)
def test_a_bad_setting_is_one_config_error_line(
    backend: Backend, name: str, value: str, says: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "askq", "mcp"],
        capture_output=True,
        text=True,
        timeout=30,
        env=mcp_env(backend, **{name: value}),
    )
    assert result.returncode == 12
    assert result.stderr.startswith(f"CONFIG_ERROR: settings: {name}: "), result.stderr
    assert says in result.stderr and result.stderr.count("\n") == 1


async def test_a_connection_may_name_who_asks_unless_told_not_to(
    backend: Backend, seam: Seam
) -> None:
    mem = MemoryAnswerer()
    child = {"io.askq/agent": "helper-2", "io.askq/owner": "boss", "io.askq/turn": "t-9"}
    async with seam.agent("boss"), running(seam, mem, "humans"):
        async with mcp_client(backend, "stdio", "legacy") as client:
            result = await client.call_tool("ask_user_question", SEED, meta=child)
            assert result.is_error and text(result).startswith("DELEGATED_CALLER: ")
            assert "'helper-2'" in text(result)
        env = {"ASKQ_MCP_CLIENT_IDENTITY": "false"}
        async with mcp_client(backend, "stdio", "legacy", env=env) as client:
            call = asyncio.ensure_future(client.call_tool("ask_user_question", SEED, meta=child))
            offer = await mem.next_presented(20)
            assert (offer.caller.agent_id, offer.caller.owner) == ("mcp", None)
            assert offer.caller.turn_id.startswith("mcp-stdio-")
            await mem.answer(offer.request_id, NO)
            assert text(await asyncio.wait_for(call, 20)) == NO_JSON


# --- runs with the same call id, or the same arguments ----------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_runs_with_the_same_tool_call_id_are_each_asked(
    backend: Backend, seam: Seam, transport: str, era: str
) -> None:
    """`io.askq/toolCallId` names a call within its run (the turn the client names):
    two runs calling with `call_1` are two questions."""
    mem = MemoryAnswerer()
    turns = [f"turn-{uuid.uuid4().hex}" for _ in range(3)]
    async with running(seam, mem, "humans"), client_factory(backend, transport, era) as connect:

        async def start(i: int) -> str:
            meta = {"io.askq/turn": turns[i], "io.askq/toolCallId": "call_1"}
            async with connect() as client:
                return text(await client.call_tool("ask_user_question", SEED, meta=meta))

        results, offers = await asked_apart(mem, start)
    assert results == [YES_JSON, NO_JSON, NO_JSON]
    assert [o.caller.turn_id for o in offers] == turns


async def test_calls_without_a_run_are_never_merged(backend: Backend, seam: Seam) -> None:
    """2026-era HTTP naming no turn: no session, no run, so no key. Two clients asking
    the same at once are asked apart (not one told that the other took its question
    over); a dropped call is withdrawn at once (nothing could reattach to it); a call
    id with no run to be unique in is refused, saying how to name the run."""
    mem = MemoryAnswerer()
    env = {"ASKQ_MCP_REATTACH_GRACE": "60"}
    async with running(seam, mem, "humans"), http_server(backend, **env) as url:

        async def start(i: int) -> str:
            async with Client(url, mode="2026-07-28") as client:
                return text(await client.call_tool("ask_user_question", SEED))

        results, offers = await asked_apart(mem, start)
        assert results == [YES_JSON, NO_JSON, NO_JSON]
        async with Client(url, mode="2026-07-28") as client:
            dropped = asyncio.ensure_future(client.call_tool("ask_user_question", SEED))
            offer = await mem.next_presented(20)
            dropped.cancel()  # 2026 HTTP: closing the stream, no notifications/cancelled
            assert (await mem.next_retracted(20)).request_id == offer.request_id
            meta = {"io.askq/toolCallId": "call_1"}
            refused = await client.call_tool("ask_user_question", SEED, meta=meta)
    assert refused.is_error and text(refused).startswith(
        "INVALID_REQUEST: io.askq/toolCallId: a call id is unique only within its run"
    )
    assert "io.askq/turn" in text(refused) and mem.presented.empty()
