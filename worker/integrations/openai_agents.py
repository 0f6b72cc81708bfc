"""`ask_user_question` as an OpenAI Agents SDK tool (`pip install 'askq[openai-agents]'`).

A thin adapter over `AskUserQuestionTool`: a `FunctionTool` whose parameters are
askq's own schema (not strict: questions have optional fields) and whose output is
askq's compact JSON. Failures are returned as the error text the model reads, the
SDK's convention for a tool error it should act on (raising would fail the run).

The caller's turn is the run's trace (`RunConfig(trace_id=...)` to know it up front,
then `seam.abort_turn(trace_id)`), or what `turn(ctx)` returns; the tool-call id,
scoped by the turn, is the idempotency key. Cancelling the run cancels the call,
which withdraws the question.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext
from agents.tracing import get_current_trace

from .._models import Caller
from .._tool import AskUserQuestionTool, input_schema

TurnOf = Callable[[ToolContext[Any]], str]


def run_turn(ctx: ToolContext[Any]) -> str:
    """The run's trace id (`RunConfig.trace_id`, else the active trace's); a run
    without a trace (tracing disabled) gets a turn per tool call."""
    if ctx.run_config is not None and ctx.run_config.trace_id:
        return ctx.run_config.trace_id
    trace = get_current_trace()
    if trace is not None and trace.trace_id and trace.trace_id != "no-op":
        return trace.trace_id
    return f"openai-agents:{ctx.tool_call_id}"


def ask_user_question_tool(
    tool: AskUserQuestionTool,
    *,
    agent_id: str = "openai-agents",
    owner: str | None = None,
    turn: TurnOf = run_turn,
) -> FunctionTool:
    """The tool for `Agent(tools=[...])`, asking as `agent_id` (owned by `owner`, if a
    sub-agent)."""

    async def invoke(ctx: ToolContext[Any], args_json: str) -> str:
        turn_id = turn(ctx)
        result = await tool.execute(
            args_json,
            Caller(agent_id=agent_id, turn_id=turn_id, owner=owner),
            tool_call_id=f"openai-agents:{turn_id}:{ctx.tool_call_id}",
        )
        return result.content

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=input_schema(),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )
