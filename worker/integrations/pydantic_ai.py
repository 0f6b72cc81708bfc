"""`ask_user_question` as a pydantic-ai tool (`pip install 'askq[pydantic-ai]'`).

A thin adapter over `AskUserQuestionTool`: the model sees askq's own schema and gets
askq's compact JSON back. The caller's turn is the agent run (`RunContext.run_id`:
pass `run_id=` to `Agent.run` to know it up front, and `seam.abort_turn(run_id)` to
abort); the tool-call id within the run is the idempotency key. pydantic-ai makes the
run id unique per run (a fresh UUID7, or the one given, refused if already in the
message history; a durable engine's re-execution keeps it), while its tool-call ids
may repeat across runs (a test model's `call_0`). A context without a run id (built by
hand) asks without a key, in a turn of its own. Cancelling the run cancels the call,
which withdraws the question.

Errors follow pydantic-ai's convention: invalid arguments are a `ModelRetry` (the model
corrects them and calls again), every other failure (NO_ANSWERER, ABORTED,
DELEGATED_CALLER, TIMED_OUT) a `ToolFailed` the model reads and adapts to.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic_ai import ModelRetry, RunContext, Tool
from pydantic_ai.exceptions import ToolFailed

from ..protocol._errors import ErrorCode
from ..protocol._models import Caller
from ..seam._tool import AskUserQuestionTool, input_schema, warn_unkeyed_once


def ask_user_question_tool(
    tool: AskUserQuestionTool, *, agent_id: str = "pydantic-ai", owner: str | None = None
) -> Tool[Any]:
    """The tool for `Agent(tools=[...])`, asking as `agent_id` (owned by `owner`, if a
    sub-agent)."""

    async def ask_user_question(ctx: RunContext[Any], **args: Any) -> str:
        run = ctx.run_id or None
        if run is None:
            warn_unkeyed_once("pydantic-ai", "Agent.run gives each run an id: call the tool there.")
        turn = run or f"pydantic-ai-call-{uuid.uuid4().hex}"
        result = await tool.execute(
            args,
            Caller(agent_id=agent_id, turn_id=turn, owner=owner),
            tool_call_id=ctx.tool_call_id if run is not None and ctx.tool_call_id else None,
            run_id=run,
        )
        if result.code == ErrorCode.INVALID_REQUEST:
            raise ModelRetry(result.content)
        if result.is_error:
            raise ToolFailed(result.content)
        return result.content

    return Tool.from_schema(
        ask_user_question,
        name=tool.name,
        description=tool.description,
        json_schema=input_schema(),
        takes_ctx=True,
    )
