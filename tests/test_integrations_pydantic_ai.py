"""`ask_user_question` inside pydantic-ai's own agent loop (a `FunctionModel` plays the
model), answered by a real answerer group."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from conftest import NO_JSON, SEED, YES_JSON, Backend, running
from pydantic_ai import Agent, CancellationToken, RunContext
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage
from two_runs import asked_apart

from askq import AskUserQuestionTool, Offer, input_schema
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.pydantic_ai import ask_user_question_tool
from askq.seam import _tool as askq_tool
from askq.seam._tool import tool_call_key


def yes(offer: Offer) -> list[dict[str, Any]]:
    return [{"id": "cleanup", "selected": ["Yes, delete them (Recommended)"]}]


class ScriptedModel:
    """Calls the tool with each of `calls` in turn, then answers with what the tool
    returned last; records what it saw."""

    def __init__(self, *calls: Any) -> None:
        self.calls = list(calls)
        self.seen: list[Any] = []
        self.schemas: list[dict[str, Any]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.schemas = [t.parameters_json_schema for t in info.function_tools]
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        for part in last.parts:
            if isinstance(part, (ToolReturnPart, RetryPromptPart)):
                self.seen.append(part)
        if self.calls:
            args = self.calls.pop(0)
            call = ToolCallPart("ask_user_question", json.dumps(args), f"call_{len(self.calls)}")
            return ModelResponse(parts=[call])
        part = self.seen[-1]
        text = part.content if isinstance(part.content, str) else json.dumps(part.content)
        return ModelResponse(parts=[TextPart(text)])


def agent_for(tool: AskUserQuestionTool, model: ScriptedModel) -> Agent[None, str]:
    return Agent(FunctionModel(model), tools=[ask_user_question_tool(tool, agent_id="pa-agent")])


async def test_the_model_sees_askq_schema_and_gets_its_json(backend: Backend) -> None:
    mem = MemoryAnswerer(reply=yes)
    model = ScriptedModel(SEED)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        result = await agent_for(AskUserQuestionTool(seam), model).run("clean up?", run_id="run-1")
        offer = await mem.next_presented()
        # The tool call, in its run, is the idempotency key.
        key = tool_call_key("pa-agent", "run-1", "call_0")
        assert await seam.idempotent_request(key) == offer.request_id
    assert result.output == YES_JSON
    assert model.schemas == [input_schema()]
    returned = model.seen[-1]
    assert isinstance(returned, ToolReturnPart) and returned.content == YES_JSON
    assert (offer.caller.agent_id, offer.caller.turn_id) == ("pa-agent", "run-1")


async def test_invalid_arguments_are_a_retry_then_answered(backend: Backend) -> None:
    mem = MemoryAnswerer(reply=yes)
    bad = {"questions": [{"id": "cleanup", "question": "?", "header": "h", "options": "x"}]}
    model = ScriptedModel(bad, SEED)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        result = await agent_for(AskUserQuestionTool(seam), model).run("clean up?")
    retry, answered = model.seen
    assert isinstance(retry, ToolReturnPart) and retry.outcome == "retried"  # ModelRetry
    assert retry.content == "INVALID_REQUEST: questions[0].options: Input should be a valid list"
    assert isinstance(answered, ToolReturnPart) and result.output == YES_JSON


async def test_no_answerer_is_a_failed_tool_result_the_model_reads(backend: Backend) -> None:
    model = ScriptedModel(SEED)
    async with backend.seam() as seam:
        result = await agent_for(AskUserQuestionTool(seam), model).run("clean up?")
    (failed,) = model.seen
    assert isinstance(failed, ToolReturnPart) and failed.outcome == "failed"
    assert result.output.startswith("NO_ANSWERER: No answerer accepted this question")
    assert result.output == failed.content


async def test_aborting_the_run_turn_and_cancelling_the_run(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        agent = agent_for(AskUserQuestionTool(seam), ScriptedModel(SEED))
        run = asyncio.create_task(agent.run("clean up?", run_id="run-abort"))
        await mem.next_presented(timeout=20)
        await seam.abort_turn("run-abort")
        assert (await run).output.startswith("ABORTED: The user aborted this turn")

        token = CancellationToken()
        agent = agent_for(AskUserQuestionTool(seam), ScriptedModel(SEED))
        run = asyncio.create_task(agent.run("clean up?", cancellation_token=token))
        offer = await mem.next_presented(timeout=20)
        token.cancel()
        with pytest.raises(RunCancelled):
            await run
        retraction = await mem.next_retracted()
        while retraction.request_id != offer.request_id:
            retraction = await mem.next_retracted()
        assert retraction.state == "CANCELLED"


# --- two runs with the same call id (the scripted model's `call_0` in each) -------------


async def test_two_runs_with_the_same_call_id_are_each_asked(backend: Backend) -> None:
    """pydantic-ai's run id is unique per run: the same call id in two runs is two
    questions; the same run id again (a durable engine re-running it) reattaches."""
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        tool = AskUserQuestionTool(seam)

        async def start(i: int) -> str:
            return (await agent_for(tool, ScriptedModel(SEED)).run("clean up?")).output

        results, offers = await asked_apart(mem, start)
        run_id = offers[0].caller.turn_id
        again = await agent_for(tool, ScriptedModel(SEED)).run("clean up?", run_id=run_id)
        assert mem.presented.empty()
    assert results == [YES_JSON, NO_JSON, NO_JSON] and again.output == YES_JSON
    assert len({o.caller.turn_id for o in offers}) == 3


async def test_a_context_without_a_run_id_asks_without_a_key(
    backend: Backend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RunContext built by hand has no run id: the call asks without a key, in a turn
    of its own, never in one shared with every other such call."""
    monkeypatch.setattr(askq_tool, "_warned", set(), raising=False)
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        function = ask_user_question_tool(AskUserQuestionTool(seam)).function
        ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="call_0")
        assert ctx.run_id is None

        async def start(i: int) -> str:
            return str(await function(ctx, **SEED))  # type: ignore[call-arg]

        with caplog.at_level(logging.WARNING, logger="askq.tool"):
            results, offers = await asked_apart(mem, start)
        for offer in offers:
            assert (await seam.request_info(offer.request_id)).request.idempotency is None
    assert results == [YES_JSON, NO_JSON, NO_JSON]
    assert len({o.caller.turn_id for o in offers}) == 3
    assert [r for r in caplog.records if "pydantic-ai: no id unique" in r.getMessage()]
