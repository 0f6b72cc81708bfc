"""`with_approval` inside the OpenAI Agents SDK's own runner (a `Model` stub plays the
model), the decisions coming from a real answerer group."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from conftest import Backend, running
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from askq import AskError, Caller, ErrorCode, Offer, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.approvals import approval_key
from askq.integrations.openai_agents_approvals import with_approval


class CallsOnce(Model):
    """Calls `drop_rows` with `arguments` (call id `call_1`), then says what it got."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self.outputs: list[str] = []

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        *rest: Any,
        **kw: Any,
    ) -> ModelResponse:
        if isinstance(input, list):
            self.outputs = [
                str(item["output"]) for item in input if item.get("type") == "function_call_output"
            ]
        if not self.outputs:
            call = ResponseFunctionToolCall(
                arguments=json.dumps(self.arguments),
                call_id="call_1",
                name="drop_rows",
                type="function_call",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(text=self.outputs[-1], type="output_text", annotations=[])
        message = ResponseOutputMessage(
            id="msg_1", content=[text], role="assistant", status="completed", type="message"
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


RAN: list[tuple[str, int]] = []


@function_tool
async def drop_rows(table: str, limit: int) -> str:
    """Drop up to `limit` rows of `table`."""
    RAN.append((table, limit))
    return f"dropped {limit} rows from {table}"


async def run(seam: Seam, trace_id: str, arguments: dict[str, Any] | None = None) -> str:
    agent = Agent(
        name="cleaner",
        model=CallsOnce(arguments or {"table": "users", "limit": 10}),
        tools=[with_approval(drop_rows, seam, agent_id="oa-agent")],
    )
    config = RunConfig(trace_id=trace_id, tracing_disabled=True)
    return str((await Runner.run(agent, "clean up", run_config=config)).final_output)


def reply(offer: Offer, selected: list[str] | None = None, custom: str | None = None) -> Any:
    body: dict[str, Any] = {"id": "approval", "selected": selected or []}
    return [body | ({"custom": custom} if custom is not None else {})]


@pytest.fixture(autouse=True)
def nothing_ran() -> None:
    RAN.clear()


async def test_approve_reject_and_edit_in_the_sdk_loop(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):

        async def decided(trace_id: str, answer: Any) -> tuple[str, Offer]:
            task = asyncio.create_task(run(seam, trace_id))
            offer = await mem.next_presented(timeout=20)
            await mem.answer(offer.request_id, answer(offer))
            return await task, offer

        approved, offer = await decided("trace_a", lambda o: reply(o, ["Approve"]))
        assert approved == "dropped 10 rows from users"
        action = offer.questions[0].action
        assert action is not None and action.tool == "drop_rows"
        assert action.arguments == {"table": "users", "limit": 10}
        assert action.arguments_schema == drop_rows.params_json_schema
        assert (offer.caller.agent_id, offer.caller.turn_id) == ("oa-agent", "trace_a")
        key = approval_key(Caller(agent_id="oa-agent", turn_id="trace_a"), "trace_a", "call_1")
        assert await seam.idempotent_request(key) == offer.request_id

        rejected, _ = await decided("trace_r", lambda o: reply(o, custom="not the users table"))
        assert rejected.startswith("The user rejected running drop_rows, so it did not run.")
        assert '"not the users table"' in rejected

        task = asyncio.create_task(run(seam, "trace_e"))
        offer = await mem.next_presented(timeout=20)
        with pytest.raises(AskError) as info:  # the tool's own schema refuses the edit
            await mem.answer(offer.request_id, reply(offer, custom='{"table": "tmp"}'))
        assert info.value.code is ErrorCode.INVALID_REQUEST
        assert "edited arguments.limit: missing" in info.value.message
        await mem.answer(offer.request_id, reply(offer, custom='{"table": "tmp", "limit": 3}'))
        edited = await task
    assert edited.startswith("The user changed the arguments before approving drop_rows")
    assert edited.endswith("Its result: dropped 3 rows from tmp")
    assert RAN == [("users", 10), ("tmp", 3)]


async def test_two_runs_with_the_same_call_id_and_no_answerer(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam:
        nobody = await run(seam, "trace_nobody")
        async with running(seam, mem, "humans"):
            first = asyncio.create_task(run(seam, "trace_1"))
            offer = await mem.next_presented(timeout=20)
            await mem.answer(offer.request_id, reply(offer, ["Approve"]))
            second = asyncio.create_task(run(seam, "trace_2"))  # the same call_1, asked anew
            again = await mem.next_presented(timeout=20)
            await mem.answer(again.request_id, reply(again, ["Reject"]))
            outputs = [await first, await second]
    assert nobody.startswith("NO_ANSWERER:")
    assert again.request_id != offer.request_id
    assert outputs[0] == "dropped 10 rows from users"
    assert outputs[1].startswith("The user rejected running drop_rows")
    assert RAN == [("users", 10)]
