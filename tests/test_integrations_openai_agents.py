"""`ask_user_question` inside the OpenAI Agents SDK's own runner (a `Model` stub plays
the model), answered by a real answerer group."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, set_trace_processors, trace
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tracing.processors import default_processor
from agents.usage import Usage
from conftest import NO_JSON, SEED, YES_JSON, Backend, running
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from test_processes import worker_process
from two_runs import asked_apart

from askq import AskUserQuestionTool, Seam, input_schema
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.openai_agents import ask_user_question_tool
from askq.seam import _tool as askq_tool
from askq.seam._tool import tool_call_key


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
            # The tool call, in its run (the trace id given), is the idempotency key.
            assert await seam.idempotent_request(tool_call_key("oa-agent", "trace_1", "call_1"))
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
        assert offer.caller.turn_id.startswith("openai-agents-call-")  # no trace: the call's own
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        retraction = await mem.next_retracted()
    assert (retraction.request_id, retraction.state) == (offer.request_id, "CANCELLED")


# --- two runs with the same call id (the model's `call_1` in each) -----------------------


@pytest.fixture
def traces_not_exported() -> Iterator[None]:
    """Tracing on, its traces kept in process (no exporter to reach for)."""
    set_trace_processors([])
    try:
        yield
    finally:
        set_trace_processors([default_processor()])


async def final_output(seam: Seam, config: RunConfig) -> str:
    agent = agent_for(AskUserQuestionTool(seam), ScriptedModel(SEED))  # always call_1
    return str((await Runner.run(agent, "clean up?", run_config=config)).final_output)


async def test_two_untraced_runs_with_the_same_call_id_are_each_asked(
    backend: Backend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing disabled, as the SDK's testing recipes do, and no trace id given: no id
    unique to the run, so no idempotency key (said once in the log), and each call is
    its own turn."""
    monkeypatch.setattr(askq_tool, "_warned", set(), raising=False)
    mem = MemoryAnswerer()
    untraced = RunConfig(tracing_disabled=True)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        with caplog.at_level(logging.WARNING, logger="askq.tool"):
            results, offers = await asked_apart(mem, lambda i: final_output(seam, untraced))
        for offer in offers:
            assert (await seam.request_info(offer.request_id)).request.idempotency is None
    assert results == [YES_JSON, NO_JSON, NO_JSON]
    turns = {o.caller.turn_id for o in offers}
    assert len(turns) == 3 and all(t.startswith("openai-agents-call-") for t in turns)
    (warning,) = [r for r in caplog.records if "no id unique to this run" in r.getMessage()]
    assert "RunConfig(trace_id=gen_trace_id())" in warning.getMessage()


@pytest.mark.usefixtures("traces_not_exported")
async def test_runs_in_one_trace_with_the_same_call_id_are_each_asked(backend: Backend) -> None:
    """A trace may hold several runs (`with trace(...)` around them): it is their turn
    (aborting it reaches them all), not an id of either run."""
    mem = MemoryAnswerer()
    traced = RunConfig(tracing_disabled=False)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        with trace("two runs") as workflow:
            results, offers = await asked_apart(mem, lambda i: final_output(seam, traced))
    assert results == [YES_JSON, NO_JSON, NO_JSON]
    assert {o.caller.turn_id for o in offers} == {workflow.trace_id}


async def test_runs_with_their_own_trace_ids_are_asked_apart_and_a_rerun_reattaches(
    backend: Backend,
) -> None:
    """The trace id given per run is the run's id: the same call id in two runs is two
    questions; the same run run again (an agent restarted) gets its answer, asked once."""
    mem = MemoryAnswerer()
    ids = [f"trace_{uuid.uuid4().hex}" for _ in range(3)]
    async with backend.seam() as seam, running(seam, mem, "humans"):
        results, offers = await asked_apart(mem, lambda i: final_output(seam, config(ids[i])))
        again = await final_output(seam, config(ids[0]))
        assert mem.presented.empty()
        assert await seam.idempotent_request(tool_call_key("oa-agent", ids[1], "call_1")) == (
            offers[1].request_id
        )
    assert results == [YES_JSON, NO_JSON, NO_JSON] and again == YES_JSON
    assert [o.caller.turn_id for o in offers] == ids
