"""`ask_user_question` inside the OpenAI Agents SDK's own runner (a `Model` stub plays
the model), answered by a real answerer group."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from conftest import SEED, YES_JSON, Backend, running
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from test_processes import worker_process

from askq import AskUserQuestionTool, input_schema
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.openai_agents import ask_user_question_tool


class ScriptedModel(Model):
    """Calls the tool with each of `calls` in turn, then says what the tool returned
    last; records the tool outputs and definitions it was given."""

    def __init__(self, *calls: Any) -> None:
        self.calls = list(calls)
        self.outputs: list[str] = []
        self.tools: list[Any] = []

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        *rest: Any,
        **kw: Any,
    ) -> ModelResponse:
        self.tools = list(tools)
        if isinstance(input, list):
            self.outputs = [
                str(item["output"]) for item in input if item.get("type") == "function_call_output"
            ]
        if self.calls:
            n = len(self.calls)
            call = ResponseFunctionToolCall(
                arguments=json.dumps(self.calls.pop(0)),
                call_id=f"call_{n}",
                name="ask_user_question",
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


def agent_for(tool: AskUserQuestionTool, model: ScriptedModel) -> Agent[Any]:
    return Agent(
        name="asker", model=model, tools=[ask_user_question_tool(tool, agent_id="oa-agent")]
    )


def config(trace_id: str) -> RunConfig:
    return RunConfig(trace_id=trace_id, tracing_disabled=True)


async def test_answered_by_an_auto_worker_process(backend: Backend) -> None:
    model = ScriptedModel(SEED)
    with worker_process(backend, "auto"):
        async with backend.seam() as seam:
            agent = agent_for(AskUserQuestionTool(seam), model)
            result = await Runner.run(agent, "clean up?", run_config=config("trace_1"))
            # The tool call, in its turn, is the idempotency key.
            assert await seam.idempotent_request("openai-agents:trace_1:call_1")
    assert result.final_output == YES_JSON
    assert model.outputs == [YES_JSON]
    (definition,) = model.tools
    assert isinstance(definition, FunctionTool)
    assert definition.params_json_schema == input_schema()
    assert definition.strict_json_schema is False


async def test_the_run_trace_is_the_turn_and_errors_are_text(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam:
        nobody = await Runner.run(
            agent_for(AskUserQuestionTool(seam), ScriptedModel(SEED)),
            "clean up?",
            run_config=config("trace_nobody"),
        )
        no_answerer = nobody.final_output
        async with running(seam, mem, "humans"):
            agent = agent_for(AskUserQuestionTool(seam), ScriptedModel(SEED))
            run = asyncio.create_task(Runner.run(agent, "?", run_config=config("trace_abort")))
            offer = await mem.next_presented(timeout=20)
            assert (offer.caller.agent_id, offer.caller.turn_id) == ("oa-agent", "trace_abort")
            await seam.abort_turn("trace_abort")
            aborted = (await run).final_output
    assert no_answerer.startswith("NO_ANSWERER: No answerer accepted this question")
    assert aborted.startswith("ABORTED: The user aborted this turn")


async def test_invalid_input_is_text_the_model_reads(backend: Backend) -> None:
    bad = {"questions": [{"id": "x y", "question": "?", "header": "h"}]}
    model = ScriptedModel(bad)
    async with backend.seam() as seam:
        result = await Runner.run(
            agent_for(AskUserQuestionTool(seam), model), "?", run_config=config("trace_bad")
        )
    assert result.final_output == (
        "INVALID_REQUEST: questions[0].id: String should match pattern"
        " '^[A-Za-z0-9][A-Za-z0-9_.:-]*$'"
    )


async def test_cancelling_the_run_withdraws_the_question(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        agent = agent_for(AskUserQuestionTool(seam), ScriptedModel(SEED))
        untraced = RunConfig(tracing_disabled=True)
        run = asyncio.create_task(Runner.run(agent, "?", run_config=untraced))
        offer = await mem.next_presented(timeout=20)
        assert offer.caller.turn_id == "openai-agents:call_1"  # no trace: a turn per call
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        retraction = await mem.next_retracted()
    assert (retraction.request_id, retraction.state) == (offer.request_id, "CANCELLED")
