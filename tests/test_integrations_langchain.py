"""`ask_user_question` inside a LangGraph agent loop (model node -> `ToolNode` -> model,
routed by `tools_condition`), the model a LangChain fake chat model that makes tool
calls, answered by a real answerer group."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from conftest import NO_JSON, SEED, YES_JSON, Backend, running
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool as as_tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from two_runs import asked_apart

from askq import AskUserQuestionTool, Offer, input_schema
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.langchain import ask_user_question_tool
from askq.seam import _tool as askq_tool


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


def graph(
    tool: AskUserQuestionTool,
    model: GenericFakeChatModel,
    *more_tools: Any,
    checkpointer: Any = None,
) -> Any:
    async def call_model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    tools = [ask_user_question_tool(tool, agent_id="lg-agent"), *more_tools]
    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=False))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


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
        # The tool call, in its graph task, is idempotent (a re-run of the task reattaches).
        assert (await seam.request_info(offer.request_id)).request.idempotency is not None
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


# --- two runs with the same call id (the fake model's `call_0` in each) -----------------


async def test_two_runs_of_one_thread_with_the_same_call_id_are_each_asked(
    backend: Backend,
) -> None:
    """A thread is no run: each run of it repeats the model's call ids. The key is the
    call within the LangGraph task, unique per run."""
    mem = MemoryAnswerer()
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:6]}"}}
    async with backend.seam() as seam, running(seam, mem, "humans"):
        tool = AskUserQuestionTool(seam)

        async def start(i: int) -> str:
            state = await graph(tool, calling(SEED), checkpointer=saver).ainvoke(
                {"messages": [("user", "clean up?")]}, config
            )
            return str(tool_messages(state)[-1].content)

        results, offers = await asked_apart(mem, start)
        for offer in offers:
            assert (await seam.request_info(offer.request_id)).request.idempotency is not None
    assert results == [YES_JSON, NO_JSON, NO_JSON]
    assert {o.caller.turn_id for o in offers} == {config["configurable"]["thread_id"]}


async def test_a_graph_run_resumed_from_its_checkpoint_reattaches(backend: Backend) -> None:
    """The run fails after the human answered (another tool of the same task raises);
    resumed from its checkpoint, LangGraph runs the task again: the same task, so the
    same key, and the answer comes back without asking again."""
    answered = asyncio.Event()

    def human(offer: Offer) -> list[dict[str, Any]]:
        answered.set()
        return yes(offer)

    mem = MemoryAnswerer(reply=human)
    failures = [RuntimeError("the disk filled up")]

    @as_tool
    async def clean_up() -> str:
        """Deletes the build artifacts."""
        await answered.wait()  # fail only once the human has answered
        if failures:
            raise failures.pop()
        return "deleted"

    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "ask_user_question", "args": SEED, "id": "call_0"},
            {"name": "clean_up", "args": {}, "id": "call_1"},
        ],
    )
    model = GenericFakeChatModel(messages=iter([both, AIMessage(content="done")]))
    config = {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:6]}"}}
    async with backend.seam() as seam, running(seam, mem, "humans"):
        run = graph(AskUserQuestionTool(seam), model, clean_up, checkpointer=InMemorySaver())
        with pytest.raises(RuntimeError, match="disk filled up"):
            await run.ainvoke({"messages": [("user", "clean up?")]}, config)
        await mem.next_presented()
        state = await run.ainvoke(None, config)  # resumed from the checkpoint
    asked, cleaned = tool_messages(state)
    assert (asked.content, cleaned.content) == (YES_JSON, "deleted")
    assert mem.presented.empty()  # asked once


async def test_plain_langchain_has_no_run_id_and_asks_each_call(
    backend: Backend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a graph, and without an askq_turn_id, no id outlives the call: each call
    is asked, without an idempotency key (said once in the log)."""
    monkeypatch.setattr(askq_tool, "_warned", set(), raising=False)
    mem = MemoryAnswerer()
    call = {"name": "ask_user_question", "args": SEED, "id": "call_0", "type": "tool_call"}
    async with backend.seam() as seam, running(seam, mem, "humans"):
        adapter = ask_user_question_tool(AskUserQuestionTool(seam), agent_id="lc-agent")

        async def start(i: int) -> str:
            return str((await adapter.ainvoke(call)).content)

        with caplog.at_level(logging.WARNING, logger="askq.tool"):
            results, offers = await asked_apart(mem, start)
        for offer in offers:
            assert (await seam.request_info(offer.request_id)).request.idempotency is None
        # A run id given: the call is idempotent within it.
        turn = {"configurable": {"askq_turn_id": f"turn-{uuid.uuid4().hex[:6]}"}}
        first = asyncio.ensure_future(adapter.ainvoke(call, turn))
        offer = await mem.next_presented(20)
        assert (await seam.request_info(offer.request_id)).request.idempotency is not None
        await mem.answer(offer.request_id, yes(offer))
        again = await adapter.ainvoke(call, turn)
        assert (await first).content == again.content == YES_JSON
        assert mem.presented.empty()
    assert results == [YES_JSON, NO_JSON, NO_JSON]
    (warning,) = [r for r in caplog.records if "no id unique to this run" in r.getMessage()]
    assert 'configurable["askq_turn_id"]' in warning.getMessage()
