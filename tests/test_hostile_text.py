"""Hostile text at every public entry point (issue 22, item 12): lone surrogates (a JSON
`\\ud800` escape; a byte that was not UTF-8 in argv, decoded with surrogateescape), NUL,
a bidi override, the empty string, a megabyte. Each call either works or is refused
with an AskError naming the field (INVALID_REQUEST; CONFIG_ERROR for a replica's
settings), whose message can be written as UTF-8 and shows what it quotes escaped;
never a raw exception (UnicodeEncodeError, pydantic's errors) and never INTERNAL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import ROOT, SEED, YES, Backend, running

from askq import (
    AnswererRuntime,
    AskError,
    AskUserQuestionTool,
    Caller,
    ErrorCode,
    Seam,
    SyncSeam,
    quoted,
    visible,
)
from askq.answerers.memory import MemoryAnswerer

SURROGATE = "x\ud800"  # a JSON "\ud800" escape
ESCAPED_BYTE = "\udcff"  # b"\xff" from argv or the environment (surrogateescape)
NUL = "nul\x00byte"
RTL = "\u202eevil"
EMPTY = ""
MEGABYTE = "m" * 1_000_000

# Text no field takes, and text only a field of free text takes (not a name or an id
# with a pattern: a group name, a request id, a question id, a scope key).
NEVER_VALID = (SURROGATE, ESCAPED_BYTE, EMPTY, MEGABYTE)
FREE_TEXT_ONLY = (NUL, RTL)
HOSTILE = (*NEVER_VALID, *FREE_TEXT_ONLY)


def caller(**given: str) -> Caller:
    return Caller(**{"agent_id": "a1", "turn_id": uuid.uuid4().hex, **given})


def question(**fields: Any) -> dict[str, Any]:
    return {"questions": [{**SEED["questions"][0], **fields}]}


@dataclass
class Place:
    """Where text enters: `field`, what a refusal names; `kind`: "text" (free text
    takes NUL and a bidi override), "name" (a pattern: nothing hostile passes),
    "lenient" (a read that answers None for an id that cannot be one).
    `code`: the code of a refusal."""

    field: str
    kind: str
    call: Callable[[Any, str], Awaitable[Any]]
    code: ErrorCode = ErrorCode.INVALID_REQUEST


DESK = {"desk": "yes"}  # the scope of the desk's own requests (no other ask reaches it)


class Desk:
    """One group with a human who never answers by himself: `fresh()` is a new pending
    request (its id), presented to the group. Other asks match no group (NO_ANSWERER
    at once: the text was taken)."""

    def __init__(self, seam: Seam, human: MemoryAnswerer, runtime: AnswererRuntime) -> None:
        self.seam, self.human, self.runtime = seam, human, runtime
        self.asks: list[asyncio.Future[Any]] = []

    async def fresh(self) -> str:
        self.asks.append(asyncio.ensure_future(self.seam.ask(SEED, caller(), scope=DESK)))
        return (await self.human.next_presented(10)).request_id

    async def aclose(self) -> None:
        for ask in self.asks:
            ask.cancel()
        await asyncio.gather(*self.asks, return_exceptions=True)


@contextlib.asynccontextmanager
async def desk(seam: Seam) -> AsyncIterator[Desk]:
    human = MemoryAnswerer()
    async with running(seam, human, "desk", scope=DESK) as runtime:
        d = Desk(seam, human, runtime)
        try:
            yield d
        finally:
            await d.aclose()


async def _ask(seam: Seam, args: Any, who: Caller | None = None, **options: Any) -> Any:
    return await asyncio.wait_for(seam.ask(args, who or caller(), **options), 10)


async def _runtime(seam: Seam, **given: Any) -> None:
    # A tier of its own, offered nothing (no request has this scope).
    given = {"group": "g1", "priority": 7, "scope": {"never": "offered"}, **given}
    runtime = AnswererRuntime(seam, MemoryAnswerer(), **given)
    task = await runtime.start(timeout=10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def _agent(seam: Seam, agent_id: str, owner: str | None) -> AsyncIterator[None]:
    async with seam.agent(agent_id, owner):
        yield


async def _kept_agent(seam: Seam, agent_id: str, owner: str | None = None) -> str:
    async with _agent(seam, agent_id, owner):
        return "kept"


PLACES: list[Place] = [
    # who asks (the Caller is the check: made first, by the caller's code)
    Place("agent_id", "text", lambda d, s: _ask(d.seam, SEED, caller(agent_id=s))),
    Place("turn_id", "text", lambda d, s: _ask(d.seam, SEED, caller(turn_id=s))),
    Place("owner", "text", lambda d, s: _ask(d.seam, SEED, caller(owner=s))),
    # what is asked
    Place("questions[0].question", "text", lambda d, s: _ask(d.seam, question(question=s))),
    Place("questions[0].header", "text", lambda d, s: _ask(d.seam, question(header=s))),
    Place("questions[0].id", "name", lambda d, s: _ask(d.seam, question(id=s))),
    Place(
        "questions[0].options[0].label",
        "text",
        lambda d, s: _ask(d.seam, question(options=[{"label": s}])),
    ),
    Place("scope[", "name", lambda d, s: _ask(d.seam, SEED, scope={s: "v"})),
    Place("scope[", "text", lambda d, s: _ask(d.seam, SEED, scope={"k": s or "-"})),
    Place("idempotency_key", "text", lambda d, s: _ask(d.seam, SEED, idempotency_key=s)),
    Place("idempotency_key", "text", lambda d, s: d.seam.idempotent_request(s)),
    # the tool: a refusal is a tool result, never an exception
    Place(
        "tool_call_id",
        "text",
        lambda d, s: _tool(AskUserQuestionTool(d.seam).execute(SEED, caller(), tool_call_id=s)),
    ),
    Place(
        "scope[",
        "text",
        lambda d, s: _tool(
            AskUserQuestionTool(d.seam, scope={"k": s or "-"}).execute(SEED, caller())
        ),
    ),
    Place("input", "name", lambda d, s: _tool(AskUserQuestionTool(d.seam).execute(s, caller()))),
    # answering
    Place("by", "text", lambda d, s: _answer(d, YES, by=s)),
    Place("group", "name", lambda d, s: _answer(d, YES, group=s)),
    Place(  # (a blank custom text is no answer: "answer to "cleanup": choose one ...")
        "answer",
        "text",
        lambda d, s: _answer(d, [{"id": "cleanup", "selected": [], "custom": s}]),
    ),
    Place("answer to", "name", lambda d, s: _answer(d, [{"id": "cleanup", "selected": [s]}])),
    Place("answers[0].id", "name", lambda d, s: _answer(d, [{"id": s, "selected": []}])),
    Place("by", "text", lambda d, s: _handle_answer(d, by=s)),
    Place("request id", "name", lambda d, s: d.human.group.answer(s, YES, by="x")),
    Place("request id", "name", lambda d, s: d.human.group.release(s)),
    Place("request id", "name", lambda d, s: d.seam.answer(s, "desk", YES, by="x")),
    Place("group", "name", lambda d, s: _release(d, s)),
    Place("group", "name", lambda d, s: _holds(d, s)),
    Place("request id", "name", lambda d, s: d.seam.request_info(s)),
    Place("request id", "lenient", lambda d, s: d.seam.settlement(s)),
    Place("request id", "lenient", lambda d, s: d.seam.request_status(s)),
    Place("request id", "name", lambda d, s: d.seam.fire(f"timeout|{s}")),
    # withdrawing and aborting
    Place("turn_id", "text", lambda d, s: d.seam.abort_turn(s)),
    Place("by", "text", lambda d, s: d.seam.abort_turn(uuid.uuid4().hex, by=s)),
    Place("by", "text", lambda d, s: _cancel(d, by=s)),
    Place("message", "text", lambda d, s: _cancel(d, message=s)),
    Place("request id", "name", lambda d, s: d.seam.cancel(s, ErrorCode.ABORTED, "m", by="x")),
    Place("process_id", "text", lambda d, s: d.seam.forget_caller(s)),
    Place("agent_id", "text", lambda d, s: _kept_agent(d.seam, s)),
    Place("owner", "text", lambda d, s: _kept_agent(d.seam, "a1", s)),
    # the registry (an operator's commands) and a replica's settings
    Place("group", "name", lambda d, s: d.seam.registry.remove(s)),
    Place("group", "name", lambda d, s: d.seam.registry.set_priority(s, 3)),
    Place("group", "name", lambda d, s: d.seam.registry.live_replicas(s)),
    Place("group", "name", lambda d, s: _runtime(d.seam, group=s), ErrorCode.CONFIG_ERROR),
    Place("consumer", "text", lambda d, s: _runtime(d.seam, consumer=s), ErrorCode.CONFIG_ERROR),
    Place("scope[", "name", lambda d, s: _runtime(d.seam, scope={s: "*"}), ErrorCode.CONFIG_ERROR),
]


async def _tool(result: Awaitable[Any]) -> Any:
    got = await result
    if got.is_error:
        assert got.code is not None
        raise AskError(got.code, got.content.partition(": ")[2])
    return got


async def _answer(d: Desk, answers: Any, *, group: str = "desk", by: str = "x") -> Any:
    return await d.seam.answer(await d.fresh(), group, answers, by=by)


async def _handle_answer(d: Desk, *, by: str) -> Any:
    return await d.human.group.answer(await d.fresh(), YES, by=by)


async def _release(d: Desk, group: str) -> Any:
    return await d.seam.release(await d.fresh(), group)


async def _holds(d: Desk, group: str) -> Any:
    return await d.seam.holds(await d.fresh(), group)


async def _cancel(d: Desk, *, by: str = "x", message: str = "m") -> Any:
    return await d.seam.cancel(await d.fresh(), ErrorCode.ABORTED, message, by=by)


def _refused(place: Place, text: str) -> bool:
    """Whether `place` must refuse `text`."""
    if place.kind == "lenient":
        return False
    if text in NEVER_VALID:
        return not (text == EMPTY and place.field == "scope[" and place.kind == "text")
    return place.kind == "name"


def check_message(message: str) -> None:
    """A message can be written as UTF-8 and shows no control or invisible character
    as it is (it quotes them escaped)."""
    message.encode("utf-8")
    assert visible(message) == message, ascii(message)
    assert len(message) < 2000, len(message)


async def test_every_entry_point_works_or_names_the_field(backend: Backend) -> None:
    seen: list[str] = []
    async with backend.seam() as seam, desk(seam) as d:
        for place in PLACES:
            for text in HOSTILE:
                label = f"{place.field} <- {ascii(text[:12])}"
                try:
                    await place.call(d, text)
                except AskError as exc:
                    check_message(exc.message)
                    if _refused(place, text):
                        assert exc.code is place.code, (label, exc)
                        assert exc.message.startswith(place.field), (label, exc)
                    else:  # accepted text; refused for another reason (NOT_FOUND, ...)
                        assert exc.code not in (ErrorCode.INTERNAL, ErrorCode.INVALID_REQUEST), (
                            label,
                            exc,
                        )
                except Exception as exc:  # noqa: BLE001 - the point of the test
                    pytest.fail(f"{label}: raw {type(exc).__name__}: {ascii(str(exc))[:200]}")
                else:
                    assert not _refused(place, text), f"{label}: accepted"
                seen.append(label)
    assert len(seen) == len(PLACES) * len(HOSTILE)


def test_visible_and_quoted_escape_lone_surrogates() -> None:
    for text in (SURROGATE, ESCAPED_BYTE, "\udfff tail", "a\ud83d"):  # also half a pair
        shown = visible(text)
        shown.encode("utf-8")
        assert "\\ud" in shown
        quoted(text * 100).encode("utf-8")
    assert visible("ok \U0001f600") == "ok \U0001f600"  # an astral character is one char
    err = AskError(ErrorCode.INVALID_REQUEST, f"no option labelled {quoted(SURROGATE)}")
    str(err).encode("utf-8")


async def test_a_refused_answer_quoting_a_surrogate_can_be_written(seam: Seam) -> None:
    async with desk(seam) as d:
        with pytest.raises(AskError) as err:
            await d.seam.answer(
                await d.fresh(), "desk", [{"id": "cleanup", "selected": [SURROGATE]}], by="x"
            )
    assert err.value.code is ErrorCode.INVALID_REQUEST
    assert 'no option labelled "x\\ud800"' in err.value.message
    err.value.message.encode("utf-8")


def test_sync_seam_refuses_like_the_seam(backend: Backend) -> None:
    with SyncSeam(backend.url, prefix=backend.prefix, shards=backend.shards) as sync:
        with pytest.raises(AskError) as err:
            sync.abort_turn(SURROGATE)
        assert err.value.code is ErrorCode.INVALID_REQUEST
        assert err.value.message.startswith("turn_id: not valid Unicode text")
        result = sync.execute(SEED, caller(), tool_call_id=ESCAPED_BYTE)
        assert result.code is ErrorCode.INVALID_REQUEST
        assert result.content.startswith("INVALID_REQUEST: tool_call_id: not UTF-8 text")


# --- the CLI: arguments and variables as bytes ----------------------------------------

UNREACHABLE = "redis://127.0.0.1:1/0"  # a command that got as far as Redis fails (11)
XFF = b"\xff"

CLI_CASES: list[tuple[list[bytes], str, int]] = [
    ([b"abort", XFF], "TURN", 6),
    ([b"abort", b"t" + XFF + b"u"], "TURN", 6),
    ([b"show", XFF], "REQUEST_ID", 6),
    ([b"group", b"remove", XFF], "NAME", 6),
    ([b"group", b"set-priority", XFF, b"3"], "NAME", 6),
    ([b"requests", b"--group", XFF], "--group", 6),
    ([b"requests", b"--agent", XFF], "--agent", 6),
    ([b"requests", b"--turn=" + XFF], "--turn", 6),
    ([b"health", b"worker", b"--group", XFF], "--group", 6),
    ([b"health", b"worker", b"--group", b"g", b"--consumer", XFF], "--consumer", 6),
    ([b"ask", b"-q", XFF], "--question", 6),
    ([b"ask", b"-q", b"ok?", b"-o", XFF], "--option", 6),
    ([b"ask", b"-q", b"ok?", b"--header", XFF], "--header", 6),
    ([b"ask", b"-q", b"ok?", b"--agent", XFF], "--agent", 6),
    ([b"ask", b"-q", b"ok?", b"--turn", XFF], "--turn", 6),
    ([b"ask", b"-q", b"ok?", b"--owner", XFF], "--owner", 6),
    ([b"ask", b"-q", b"ok?", b"--scope", b"k=" + XFF], "--scope", 6),
    ([b"ask", b"-q", b"ok?", b"--idempotency-key", XFF], "--idempotency-key", 6),
    ([b"ask", b"-q", b"ok?", b"--default", XFF], "--default", 6),
    ([b"claude-code-hook", b"--turn", XFF], "--turn", 6),
    ([b"worker", b"auto", b"--group", XFF], "--group", 12),
    ([b"worker", b"auto", b"--consumer", XFF], "--consumer", 12),
    ([b"worker", b"auto", b"--scope", b"k=" + XFF], "--scope", 12),
    ([b"worker", b"auto", b"--policy", XFF], "--policy", 12),
    ([b"--prefix", XFF, b"status"], "--prefix", 12),
    ([b"status", b"--redis-url", XFF], "--redis-url", 12),
]


def _askq(args: list[bytes], stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess[bytes]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "ASKQ_REDIS_URL": UNREACHABLE, **env}
    environ.pop("ASKQ_DEBUG", None)
    return subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"askq", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env=environ,
    )


def _one_line(out: subprocess.CompletedProcess[bytes]) -> str:
    text = out.stderr.decode("utf-8")  # strict: what it wrote is UTF-8
    assert "Traceback" not in text and "INTERNAL" not in text, text
    return text


@pytest.mark.parametrize(("args", "named", "status"), CLI_CASES, ids=lambda v: ascii(v))
def test_cli_bytes_that_are_not_utf8_are_refused_naming_the_argument(
    args: list[bytes], named: str, status: int
) -> None:
    out = _askq(args)
    text = _one_line(out)
    code = "INVALID_REQUEST" if status == 6 else "CONFIG_ERROR"
    assert out.returncode == status, text
    assert text.startswith(f"{code}: {named}: not UTF-8 text (byte 0xff at character "), text


def test_cli_text_that_is_valid_but_hostile_is_refused_by_the_api_or_shown_escaped(
    backend: Backend,
) -> None:
    environ = {"ASKQ_REDIS_URL": backend.url, "ASKQ_PREFIX": backend.prefix}
    environ["ASKQ_SHARDS"] = str(backend.shards)
    big = "t" * 100_000  # one argument can be 128 KiB at most (Linux)
    out = _askq([b"abort", big.encode()], **environ)
    assert (out.returncode, _one_line(out)) == (
        6,
        "INVALID_REQUEST: turn_id: 1-200 characters, not 100,000\n",
    )
    out = _askq([b"abort", RTL.encode()], **environ)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().startswith("turn \\u202eevil aborted")
    out = _askq([b"group", b"remove", RTL.encode()], **environ)
    assert out.returncode == 6
    assert _one_line(out).startswith('INVALID_REQUEST: group: "\\u202eevil" is not a group name')


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ASKQ_PREFIX", "\udcff"),
        ("ASKQ_EVENT_LOOP", "\udcff"),
        ("ASKQ_SHARDS", "\udcff"),
        ("ASKQ_REDIS_URL", "\udcff"),
    ],
)
def test_cli_variables_that_are_not_utf8_are_a_config_error_naming_them(
    variable: str, value: str
) -> None:
    out = _askq([b"status"], **{variable: value})
    text = _one_line(out)
    assert out.returncode == 12, text
    assert text.startswith("CONFIG_ERROR: ") and variable in text, text


def test_cli_variables_askq_only_reads_are_ignored_or_warned() -> None:
    out = _askq([b"abort", b"t"], ASKQ_LOG_LEVEL="\udcff", TRACEPARENT="\udcff")
    text = _one_line(out)
    assert out.returncode == 11, text  # got as far as Redis: the variables did no harm
    assert "ASKQ_LOG_LEVEL='\\udcff' is not a level" in text


def test_claude_code_hook_with_hostile_input_denies_naming_the_field(backend: Backend) -> None:
    environ = {"ASKQ_REDIS_URL": backend.url, "ASKQ_PREFIX": backend.prefix}
    environ["ASKQ_SHARDS"] = str(backend.shards)
    base = {
        "hook_event_name": "PreToolUse",
        "tool_name": "AskUserQuestion",
        "session_id": "s1",
        "tool_use_id": "toolu_1",
        "tool_input": {
            "questions": [
                {
                    "question": "Delete?",
                    "header": "Confirm",
                    "options": [{"label": "Yes"}, {"label": "No"}],
                    "multiSelect": False,
                }
            ]
        },
    }
    cases = [
        ({"session_id": SURROGATE}, "agent_id"),  # claude-code:<session>
        ({"tool_use_id": SURROGATE}, "tool_call_id"),
        ({"agent_id": SURROGATE}, "agent_id"),
        (
            {
                "tool_input": {
                    "questions": [{**base["tool_input"]["questions"][0], "question": SURROGATE}]
                }
            },
            "questions[0].question",
        ),  # type: ignore[index]
    ]
    for change, field in cases:
        raw = json.dumps({**base, **change})  # "\ud800" as JSON writes it
        out = _askq([b"claude-code-hook"], stdin=raw.encode(), **environ)
        assert out.returncode == 0, out.stderr
        decision = json.loads(out.stdout.decode("utf-8"))["hookSpecificOutput"]
        reason = decision["permissionDecisionReason"]
        assert decision["permissionDecision"] == "deny", decision
        assert "INVALID_REQUEST" in reason and field in reason, reason
        check_message(reason)


def test_mcp_identity_refuses_a_call_id_that_is_not_text() -> None:
    pytest.importorskip("mcp")
    from askq.integrations.mcp import McpSettings
    from askq.integrations.mcp._identity import identify

    with pytest.raises(AskError) as err:
        identify(McpSettings(), {"io.askq/toolCallId": SURROGATE}, None, "stdio-1")
    assert err.value.code is ErrorCode.INVALID_REQUEST
    assert err.value.message.startswith("io.askq/toolCallId: not valid Unicode text")
    who = identify(McpSettings(), {"io.askq/turn": "t1"}, None, "stdio-1")
    assert len(who.reattach_base({"questions": SURROGATE})) == 40  # a digest, not a crash
