"""`ask_user_question` as an OpenAI Agents SDK tool (`pip install 'askq[openai-agents]'`).

A thin adapter over `AskUserQuestionTool`: a `FunctionTool` whose parameters are
askq's own schema (not strict: questions have optional fields) and whose output is
askq's compact JSON. Failures are returned as the error text the model reads, the
SDK's convention for a tool error it should act on (raising would fail the run).

The run's id is what `turn(ctx)` returns: by default `RunConfig.trace_id` (give each
run its own, `gen_trace_id()`, to know it up front and `seam.abort_turn(trace_id)`).
It is the caller's turn, and the tool-call id within it is the idempotency key. The
SDK has no id of its own unique per run (a trace may hold several runs, and with
tracing disabled there is none), and its tool-call ids repeat across runs (a test
model's `call_1`): so a run without one asks without an idempotency key (the human
is asked again if the call is run again; said once in the log), in the active
trace's turn, else in a turn of its own. Cancelling the run cancels the call, which
withdraws the question.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext
from agents.tracing import get_current_trace

from ..protocol._models import Caller
from ..seam._tool import AskUserQuestionTool, input_schema, warn_unkeyed_once

TurnOf = Callable[[ToolContext[Any]], str | None]

UNKEYED_HOW = (
    "Pass RunConfig(trace_id=gen_trace_id()) to each run (or turn=) to make it idempotent."
)


def run_turn(ctx: ToolContext[Any]) -> str | None:
    """The id the user gave this run: `RunConfig.trace_id`. None without one: the
    active trace is no run's own (`with trace(...)` may wrap several runs)."""
    if ctx.run_config is not None and ctx.run_config.trace_id:
        return ctx.run_config.trace_id
    return None


def _unkeyed_turn() -> str:
    """The turn of a run without an id: the active trace's (so aborting it still reaches
    the call), else one of the call's own, never one another run could have."""
    trace = get_current_trace()
    if trace is not None and trace.trace_id and trace.trace_id != "no-op":
        return trace.trace_id
    return f"openai-agents-call-{uuid.uuid4().hex}"


def ask_user_question_tool(
    tool: AskUserQuestionTool,
    *,
    agent_id: str = "openai-agents",
    owner: str | None = None,
    turn: TurnOf = run_turn,
) -> FunctionTool:
    """The tool for `Agent(tools=[...])`, asking as `agent_id` (owned by `owner`, if a
    sub-agent). `turn(ctx)`: the run's id, unique per run (default: the trace id the
    run was given), or None for none."""

    async def invoke(ctx: ToolContext[Any], args_json: str) -> str:
        run = turn(ctx) or None
        if run is None:
            warn_unkeyed_once("openai-agents", UNKEYED_HOW)
        result = await tool.execute(
            args_json,
            Caller(agent_id=agent_id, turn_id=run or _unkeyed_turn(), owner=owner),
            tool_call_id=ctx.tool_call_id if run is not None else None,
            run_id=run,
        )
        return result.content

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=input_schema(),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )
