"""`ask_user_question` inside a LangGraph agent loop (model node -> `ToolNode` -> model,
routed by `tools_condition`), the model a LangChain fake chat model that makes tool
calls, answered by a real answerer group."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from conftest import SEED, YES_JSON, Backend, running
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from askq import AskUserQuestionTool, Offer, input_schema
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.langchain import ask_user_question_tool


def yes(offer: Offer) -> list[dict[str, Any]]:
    return [{"id": "cleanup", "selected": ["Yes, delete them (Recommended)"]}]


def calling(*calls: dict[str, Any]) -> GenericFakeChatModel:
    """A fake chat model: one tool call per response in turn, then "done"."""
    replies = [
        AIMessage(
            content="",
            tool_calls=[{"name": "ask_user_question", "args": args, "id": f"call_{i}"}],
        )
        for i, args in enumerate(calls)
    ]
    return GenericFakeChatModel(messages=iter([*replies, AIMessage(content="done")]))


def graph(tool: AskUserQuestionTool, model: GenericFakeChatModel) -> Any:
    async def call_model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([ask_user_question_tool(tool, agent_id="lg-agent")]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile()


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_the_thread_asks_and_the_tool_message_is_askq_json(backend: Backend) -> None:
    mem = MemoryAnswerer(reply=yes)
    async with backend.seam() as seam, running(seam, mem, "humans"):
        tool = AskUserQuestionTool(seam)
        state = await graph(tool, calling(SEED)).ainvoke(
            {"messages": [("user", "clean up?")]}, {"configurable": {"thread_id": "thread-1"}}
        )
        offer = await mem.next_presented()
        # The tool call is the idempotency key (a re-run of the call reattaches).
        assert await seam.idempotent_request("langchain:thread-1:call_0") == offer.request_id
    (message,) = tool_messages(state)
    assert (message.content, message.status, message.tool_call_id) == (
        YES_JSON,
        "success",
        "call_0",
    )
    assert (offer.caller.agent_id, offer.caller.turn_id) == ("lg-agent", "thread-1")
    # What a model bound to the tool sees: askq's own definition (LangChain leaves out
    # the schema's top-level description; the tool's description says it all).
    adapter = ask_user_question_tool(tool)
    assert adapter.args_schema == input_schema()
    expected = tool.openai()
    del expected["function"]["parameters"]["description"]
    assert convert_to_openai_tool(adapter) == expected


async def test_errors_are_error_tool_messages(backend: Backend) -> None:
    bad = {"questions": [{"id": "cleanup", "question": "?", "header": ""}]}
    async with backend.seam() as seam:
        state = await graph(AskUserQuestionTool(seam), calling(bad, SEED)).ainvoke(
            {"messages": [("user", "clean up?")]}
        )
    invalid, nobody = tool_messages(state)
    assert (invalid.status, invalid.content) == (
        "error",
        "INVALID_REQUEST: questions[0].header: String should have at least 1 character",
    )
    assert nobody.status == "error"
    assert str(nobody.content).startswith("NO_ANSWERER: No answerer accepted this question")


async def test_abort_by_turn_and_cancelling_the_run(backend: Backend) -> None:
    mem = MemoryAnswerer()
    async with backend.seam() as seam, running(seam, mem, "humans"):
        tool = AskUserQuestionTool(seam)
        turn = f"turn-{uuid.uuid4().hex[:6]}"
        config = {"configurable": {"thread_id": "thread-2", "askq_turn_id": turn}}
        run = asyncio.create_task(
            graph(tool, calling(SEED)).ainvoke({"messages": [("user", "?")]}, config)
        )
        offer = await mem.next_presented(timeout=20)
        assert offer.caller.turn_id == turn
        await seam.abort_turn(turn)
        (aborted,) = tool_messages(await run)
        assert aborted.status == "error"
        assert str(aborted.content).startswith("ABORTED: The user aborted this turn")

        run = asyncio.create_task(graph(tool, calling(SEED)).ainvoke({"messages": [("user", "?")]}))
        offer = await mem.next_presented(timeout=20)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        retraction = await mem.next_retracted()
        while retraction.request_id != offer.request_id:
            retraction = await mem.next_retracted()
        assert retraction.state == "CANCELLED"
