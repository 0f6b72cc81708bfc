"""The Claude Code bridge: the `askq claude-code-hook` command fed the hook input Claude
Code sends, and the `can_use_tool` adapter called by the Claude Agent SDK's own control
protocol handler, both answered by a real answerer group.

The hook input is built with the SDK's `PreToolUseHookInput` type, and every hook output
is validated against the SDK's `SyncHookJSONOutput` type (unknown keys refused).
"""

from __future__ import annotations

import asyncio
import json
import signal
import types
import typing
import uuid
from collections.abc import AsyncIterator
from typing import Any

from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext
from claude_agent_sdk._internal.query import Query
from claude_agent_sdk._internal.transport import Transport
from claude_agent_sdk.types import (
    PreToolUseHookInput,
    PreToolUseHookSpecificOutput,
    SyncHookJSONOutput,
)
from conftest import Backend, running
from test_processes import ASKQ, finish, worker_process
from two_runs import asked_apart

from askq import AskUserQuestionTool, Offer, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.claude_code import AskqCanUseTool, question_id

# What Claude Code's AskUserQuestion sends: 1-4 questions, 2-4 options, header <= 12.
QUESTIONS = [
    {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "Postgres", "description": "Relational, the team knows it"},
            {"label": "SQLite", "description": "A file, no server"},
        ],
        "multiSelect": False,
    },
    {
        "question": "Which checks should run before merging?",
        "header": "Checks",
        "options": [
            {"label": "Lint", "description": "ruff"},
            {"label": "Types", "description": "mypy"},
            {"label": "Tests", "description": "pytest"},
        ],
        "multiSelect": True,
    },
]
DB, CHECKS = (q["question"] for q in QUESTIONS)


def conforms(value: Any, kind: Any) -> bool:
    """`value` fits the SDK's type `kind` (its TypedDicts, with no unknown key)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return True
    if origin is typing.NotRequired:
        return conforms(value, args[0])
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if typing.is_typeddict(kind):
        hints = typing.get_type_hints(kind)
        return (
            isinstance(value, dict)
            and set(value) <= set(hints)
            and kind.__required_keys__ <= set(value)
            and all(conforms(v, hints[k]) for k, v in value.items())
        )
    if origin is dict:
        return isinstance(value, dict) and all(conforms(v, args[1]) for v in value.values())
    return isinstance(value, origin or kind)


def check_hook_output(output: dict[str, Any]) -> None:
    """The hook output as Claude Code reads it (the SDK's `SyncHookJSONOutput`), and
    every answer a string keyed by a question's text."""
    assert conforms(output, SyncHookJSONOutput), output
    specific = output.get("hookSpecificOutput", {})
    assert conforms(specific, PreToolUseHookSpecificOutput | dict[str, Any]), output
    updated = specific.get("updatedInput")
    if updated is not None:
        texts = {q["question"] for q in updated["questions"]}
        assert set(updated["answers"]) == texts
        assert all(isinstance(a, str) for a in updated["answers"].values())


def hook_input(
    tool_input: dict[str, Any], *, tool: str = "AskUserQuestion", use_id: str = "toolu_01"
) -> dict[str, Any]:
    return dict(
        PreToolUseHookInput(
            session_id="sess-1",
            transcript_path="/tmp/transcript.jsonl",
            cwd="/work/project",
            permission_mode="default",
            prompt_id="prompt-7",
            hook_event_name="PreToolUse",
            tool_name=tool,
            tool_input=tool_input,
            tool_use_id=use_id,
        )
    )


def human(offer: Offer) -> list[dict[str, Any]]:
    """A human's answer: Postgres; Lint and Tests plus an "Other" text."""
    first, second = offer.questions
    return [
        {"id": first.id, "selected": ["Postgres"]},
        {"id": second.id, "selected": ["Lint", "Tests"], "custom": "a smoke run"},
    ]


async def start_hook(backend: Backend, payload: Any, *args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *ASKQ,
        "claude-code-hook",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=backend.env(),
    )
    assert proc.stdin is not None
    proc.stdin.write(payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    proc.stdin.close()
    return proc


async def hook(backend: Backend, payload: Any, *args: str) -> dict[str, Any]:
    """Run the hook to the end; its output, checked against the SDK's schema."""
    code, out, err = await finish(await start_hook(backend, payload, *args))
    assert (code, err) == (0, ""), err
    output: dict[str, Any] = json.loads(out)
    check_hook_output(output)
    return output


def deny(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


async def test_hook_answers_with_the_humans_labels_keyed_by_question(backend: Backend) -> None:
    mem = MemoryAnswerer(reply=human)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        output = await hook(backend, hook_input({"questions": QUESTIONS}))
        offer = await mem.next_presented()
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "answered through askq",
            "updatedInput": {
                "questions": QUESTIONS,
                "answers": {DB: "Postgres", CHECKS: "Lint, Tests, a smoke run"},
            },
        }
    }
    # What the human saw: Claude Code's questions as asked, ids derived from them.
    assert [q.id for q in offer.questions] == [question_id(0, DB), question_id(1, CHECKS)]
    assert [q.question for q in offer.questions] == [DB, CHECKS]
    assert [q.header for q in offer.questions] == ["Database", "Checks"]
    assert [q.multi_select for q in offer.questions] == [False, True]
    assert offer.questions[0].options[1].description == "A file, no server"
    assert offer.caller.agent_id == "claude-code:sess-1"
    assert offer.caller.turn_id == "prompt-7"
    assert offer.scope == {"client": "claude-code", "session": "sess-1"}


async def test_hook_through_an_auto_worker_process(backend: Backend) -> None:
    with worker_process(backend, "auto", "--scope", "team=a", "--scope", "client=claude-code"):
        output = await hook(backend, hook_input({"questions": QUESTIONS[:1]}), "--scope", "team=a")
        other_team = hook_input({"questions": QUESTIONS[:1]}, use_id="toolu_02")
        elsewhere = await hook(backend, other_team, "--scope", "team=b")
    assert output["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert output["hookSpecificOutput"]["updatedInput"]["answers"] == {DB: "Postgres"}
    reason = elsewhere["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("askq: NO_ANSWERER")  # the group serves team a only


async def test_hook_sub_agent_of_a_live_session_is_delegated(backend: Backend) -> None:
    sub = {**hook_input({"questions": QUESTIONS}), "agent_id": "sub-1", "agent_type": "Explore"}
    async with backend.seam() as seam, seam.agent("claude-code:sess-1"):
        output = await hook(backend, sub)
    reason = output["hookSpecificOutput"]["permissionDecisionReason"]
    assert output == deny(reason)
    assert reason.startswith("askq: DELEGATED_CALLER: Agent 'claude-code:sess-1/sub-1'")


async def test_hook_denies_with_the_reason_when_nobody_answers(backend: Backend) -> None:
    nobody = await hook(backend, hook_input({"questions": QUESTIONS}))
    reason = nobody["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("askq: NO_ANSWERER: No answerer accepted this question")
    assert nobody == deny(reason)


async def test_hook_denies_what_askq_cannot_show(backend: Backend) -> None:
    preview = json.loads(json.dumps(QUESTIONS))
    preview[1]["options"][2]["preview"] = "<b>mockup</b>"
    output = await hook(backend, hook_input({"questions": preview}))
    assert output == deny(
        "askq: INVALID_REQUEST: questions[1].options[2].preview: an option preview; askq"
        " cannot put this question to a human as asked (ask again without it)"
    )
    number = [{**QUESTIONS[0], "kind": "number", "options": [], "min": 1, "max": 9}]
    output = await hook(backend, hook_input({"questions": number}))
    assert output == deny(
        'askq: INVALID_REQUEST: questions[0].kind: a "number" question; askq cannot put'
        " this question to a human as asked (ask again without it)"
    )
    # askq's own checks name the path too (a label over askq's 120 characters).
    long = [{**QUESTIONS[0], "options": [{"label": "x" * 121}, {"label": "y"}]}]
    output = await hook(backend, hook_input({"questions": long}))
    assert output == deny(
        "askq: INVALID_REQUEST: questions[0].options[0].label: String should have at most"
        " 120 characters"
    )


async def test_hook_ignores_other_tools_and_refuses_bad_input(backend: Backend) -> None:
    assert await hook(backend, hook_input({"command": "ls"}, tool="Bash")) == {}
    answered = {"questions": QUESTIONS, "answers": {DB: "SQLite"}}
    assert await hook(backend, hook_input(answered)) == {}
    too_long = await hook(backend, hook_input({"questions": QUESTIONS}), "--agent", "a" * 201)
    assert too_long == deny(
        "askq: INVALID_REQUEST: agent_id: 1-200 characters, not 201"
    )
    code, out, err = await finish(await start_hook(backend, b"{not json"))
    assert (code, out) == (2, "")
    assert err.startswith("askq claude-code-hook: INVALID_REQUEST: hook input: not valid JSON")


async def test_hook_denies_aborted_and_timed_out(backend: Backend) -> None:
    mem = MemoryAnswerer()  # shows the question, nobody answers
    async with backend.seam() as seam, running(seam, mem, "humans"):
        proc = await start_hook(backend, hook_input({"questions": QUESTIONS}))
        offer = await mem.next_presented(timeout=20)
        assert await seam.abort_turn("prompt-7") == 1
        code, out, _ = await finish(proc)
        reason = json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"]
        assert code == 0 and reason.startswith("askq: ABORTED: The user aborted this turn")
        assert (await mem.next_retracted()).request_id == offer.request_id

        # The same call again gets its settlement (the tool-use id is the key) ...
        again = await hook(backend, hook_input({"questions": QUESTIONS}), "--turn", "other")
        assert again == json.loads(out)
        # ... another call in another turn waits, and times out when told to.
        late = hook_input({"questions": QUESTIONS}, use_id="toolu_02")
        output = await hook(backend, late, "--turn", "other", "--timeout", "0.5")
        reason = output["hookSpecificOutput"]["permissionDecisionReason"]
        assert output == deny(reason) and reason.startswith("askq: TIMED_OUT")


async def test_hook_killed_by_claude_code_withdraws_the_question(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        proc = await start_hook(backend, hook_input({"questions": QUESTIONS}))
        offer = await mem.next_presented(timeout=20)
        proc.send_signal(signal.SIGTERM)  # the hook's timeout, or the user pressed Esc
        await finish(proc)
        retraction = await mem.next_retracted()
        assert (retraction.request_id, retraction.state) == (offer.request_id, "CANCELLED")


async def test_hook_run_again_for_the_same_call_asks_once(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        first = await start_hook(backend, hook_input({"questions": QUESTIONS}))
        offer = await mem.next_presented(timeout=20)
        first.kill()  # no goodbye: the request stays pending
        await first.wait()
        again = await start_hook(backend, hook_input({"questions": QUESTIONS}))
        await asyncio.sleep(0.5)
        await mem.answer(offer.request_id, human(offer))
        code, out, _ = await finish(again)
    assert json.loads(out)["hookSpecificOutput"]["updatedInput"]["answers"] == {
        DB: "Postgres",
        CHECKS: "Lint, Tests, a smoke run",
    }
    assert mem.presented.empty()  # asked once


# --- the Agent SDK's can_use_tool, called by the SDK's own control-protocol handler ----


class StubTransport(Transport):
    """The CLI's side of the control protocol: messages in, what the SDK writes out."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.written: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def connect(self) -> None:
        pass

    async def write(self, data: str) -> None:
        message = json.loads(data)
        if message.get("type") == "control_request":  # the SDK initializing: say yes
            self.initialize = message["request"]
            reply = {"subtype": "success", "request_id": message["request_id"], "response": {}}
            self.incoming.put_nowait({"type": "control_response", "response": reply})
            return
        self.written.put_nowait(message)

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        while (message := await self.incoming.get()) is not None:
            yield message

    async def close(self) -> None:
        self.incoming.put_nowait(None)

    def is_ready(self) -> bool:
        return True

    async def end_input(self) -> None:
        pass


def permission_request(request_id: str, tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "control_request",
        "request_id": request_id,
        "request": {
            "subtype": "can_use_tool",
            "tool_name": tool,
            "input": tool_input,
            "permission_suggestions": None,
            "blocked_path": None,
            "tool_use_id": f"toolu_{request_id}",
        },
    }


async def sdk_with(
    seam: Seam, can_use_tool: Any, hooks: dict[str, Any] | None = None
) -> tuple[Query, StubTransport]:
    transport = StubTransport()
    query = Query(transport, is_streaming_mode=True, can_use_tool=can_use_tool, hooks=hooks)
    await query.start()
    await query.initialize()
    return query, transport


async def test_sdk_can_use_tool_allows_with_the_answers(backend: Backend) -> None:
    mem = MemoryAnswerer(reply=human)
    others: list[str] = []

    async def bash_policy(
        name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        others.append(name)
        return PermissionResultDeny(message="no shell here")

    async with backend.seam() as seam, running(seam, mem, "humans"):
        adapter = AskqCanUseTool(
            AskUserQuestionTool(seam), agent_id="sdk-agent", turn_id="turn-1", other=bash_policy
        )
        query, transport = await sdk_with(seam, adapter)
        try:
            transport.incoming.put_nowait(
                permission_request("r1", "AskUserQuestion", {"questions": QUESTIONS})
            )
            answered = await asyncio.wait_for(transport.written.get(), 20)
            transport.incoming.put_nowait(permission_request("r2", "Bash", {"command": "ls"}))
            denied = await asyncio.wait_for(transport.written.get(), 20)
        finally:
            await query.close()
    assert answered == {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": "r1",
            "response": {
                "behavior": "allow",
                "updatedInput": {
                    "questions": QUESTIONS,
                    "answers": {DB: "Postgres", CHECKS: "Lint, Tests, a smoke run"},
                },
            },
        },
    }
    assert denied["response"]["response"] == {"behavior": "deny", "message": "no shell here"}
    assert others == ["Bash"]
    offer = await mem.next_presented()
    assert (offer.caller.agent_id, offer.caller.turn_id) == ("sdk-agent", "turn-1")


async def test_sdk_can_use_tool_denies_and_cancel_withdraws(backend: Backend) -> None:
    async with backend.seam() as seam:
        adapter = AskqCanUseTool(AskUserQuestionTool(seam), agent_id="sdk-agent", turn_id="t")
        query, transport = await sdk_with(seam, adapter)
        try:
            transport.incoming.put_nowait(
                permission_request("r1", "AskUserQuestion", {"questions": QUESTIONS})
            )
            nobody = (await asyncio.wait_for(transport.written.get(), 20))["response"]
            transport.incoming.put_nowait(permission_request("r2", "Write", {"file_path": "x"}))
            other = (await asyncio.wait_for(transport.written.get(), 20))["response"]
            mem = MemoryAnswerer()
            async with running(seam, mem, "humans"):
                transport.incoming.put_nowait(
                    permission_request("r3", "AskUserQuestion", {"questions": QUESTIONS})
                )
                offer = await mem.next_presented(timeout=20)
                # The SDK cancels the request (the query was interrupted).
                transport.incoming.put_nowait(
                    {"type": "control_cancel_request", "request_id": "r3"}
                )
                retraction = await mem.next_retracted()
                assert (retraction.request_id, retraction.state) == (offer.request_id, "CANCELLED")
        finally:
            await query.close()
    assert nobody["response"]["behavior"] == "deny"
    assert nobody["response"]["message"].startswith(
        "askq: NO_ANSWERER: No answerer accepted this question"
    )
    assert other["response"] == {"behavior": "deny", "message": "no permission callback for Write"}
    assert transport.written.empty()  # a cancelled request gets no response


async def test_sdk_pre_tool_use_hook_callback(backend: Backend) -> None:
    mem = MemoryAnswerer(reply=human)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        adapter = AskqCanUseTool(AskUserQuestionTool(seam), agent_id="sdk-agent", turn_id="t")
        matcher = {"matcher": "AskUserQuestion", "hooks": [adapter.pre_tool_use]}
        query, transport = await sdk_with(seam, None, hooks={"PreToolUse": [matcher]})
        try:
            (registered,) = transport.initialize["hooks"]["PreToolUse"]
            (callback_id,) = registered["hookCallbackIds"]
            for tool, tool_input in [
                ("AskUserQuestion", {"questions": QUESTIONS}),
                ("Bash", {"command": "ls"}),
            ]:
                transport.incoming.put_nowait(
                    {
                        "type": "control_request",
                        "request_id": f"h-{tool}",
                        "request": {
                            "subtype": "hook_callback",
                            "callback_id": callback_id,
                            "input": hook_input(tool_input, tool=tool),
                            "tool_use_id": "toolu_01",
                        },
                    }
                )
            replies = {}
            for _ in range(2):
                reply = (await asyncio.wait_for(transport.written.get(), 20))["response"]
                replies[reply["request_id"]] = reply
        finally:
            await query.close()
    answered, other = replies["h-AskUserQuestion"], replies["h-Bash"]
    check_hook_output(answered["response"])
    assert answered["response"]["hookSpecificOutput"]["updatedInput"]["answers"] == {
        DB: "Postgres",
        CHECKS: "Lint, Tests, a smoke run",
    }
    assert other["response"] == {}


# --- two conversations with the same tool-use id ----------------------------------------


def picked(i: int, offer: Offer) -> list[dict[str, Any]]:
    """Run i's human: Postgres for the first, SQLite after; Lint for the checks."""
    first, second = offer.questions
    return [
        {"id": first.id, "selected": ["Postgres" if i == 0 else "SQLite"]},
        {"id": second.id, "selected": ["Lint"]},
    ]


PICKED = [{DB: "Postgres", CHECKS: "Lint"}, {DB: "SQLite", CHECKS: "Lint"}]


async def hook_run(backend: Backend, payload: Any) -> tuple[int, str, str]:
    """The hook run to its end; killed if the test stops waiting for it (a run that is
    never asked waits for ever)."""
    proc = await start_hook(backend, payload)
    try:
        return await finish(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_hook_two_sessions_with_the_same_tool_use_id_are_each_asked(
    backend: Backend,
) -> None:
    """A tool-use id is unique within its conversation only: two sessions calling with
    `toolu_01` are two questions (the key is the id within the session)."""
    mem = MemoryAnswerer()
    sessions = [str(uuid.uuid4()) for _ in range(3)]

    async def start(i: int) -> Any:
        payload = {**hook_input({"questions": QUESTIONS}), "session_id": sessions[i]}
        code, out, err = await hook_run(backend, payload)
        assert (code, err) == (0, ""), err
        return json.loads(out)["hookSpecificOutput"]["updatedInput"]["answers"]

    async with backend.seam() as seam, running(seam, mem, "humans"):
        results, offers = await asked_apart(mem, start, picked)
        # The same session's call again (the hook run again): reattached, asked once.
        payload = {**hook_input({"questions": QUESTIONS}), "session_id": sessions[1]}
        again = await hook(backend, payload)
        assert mem.presented.empty()
    assert results == [PICKED[0], PICKED[1], PICKED[1]]
    assert again["hookSpecificOutput"]["updatedInput"]["answers"] == PICKED[1]
    assert [o.caller.agent_id for o in offers] == [f"claude-code:{s}" for s in sessions]


async def test_hook_without_a_session_asks_without_a_key(backend: Backend) -> None:
    mem = MemoryAnswerer()
    payload = hook_input({"questions": QUESTIONS})
    del payload["session_id"]

    async def start(i: int) -> Any:
        code, out, err = await hook_run(backend, payload)
        assert code == 0 and "no id unique to this run" in err, err
        return json.loads(out)["hookSpecificOutput"]["updatedInput"]["answers"]

    async with backend.seam() as seam, running(seam, mem, "humans"):
        results, offers = await asked_apart(mem, start, picked)
        for offer in offers:
            assert (await seam.request_info(offer.request_id)).request.idempotency is None
    assert results == [PICKED[0], PICKED[1], PICKED[1]]


async def test_sdk_adapters_of_two_runs_with_the_same_tool_use_id_are_each_asked(
    backend: Backend,
) -> None:
    """`can_use_tool` carries no session id: the adapter's turn (one per run) is what
    makes the tool-use id unique."""
    mem = MemoryAnswerer()
    turns = [f"turn-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    async with backend.seam() as seam, running(seam, mem, "humans"):

        async def start(i: int) -> Any:
            adapter = AskqCanUseTool(AskUserQuestionTool(seam), agent_id="sdk", turn_id=turns[i])
            query, transport = await sdk_with(seam, adapter)
            try:  # the same request id, so the same tool-use id (toolu_r1), every run
                request = permission_request("r1", "AskUserQuestion", {"questions": QUESTIONS})
                transport.incoming.put_nowait(request)
                reply = await asyncio.wait_for(transport.written.get(), 30)
            finally:
                await query.close()
            return reply["response"]["response"]["updatedInput"]["answers"]

        results, offers = await asked_apart(mem, start, picked)
    assert results == [PICKED[0], PICKED[1], PICKED[1]]
    assert [o.caller.turn_id for o in offers] == turns
