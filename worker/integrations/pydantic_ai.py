"""`ask_user_question` as a pydantic-ai tool (`pip install 'askq[pydantic-ai]'`).

A thin adapter over `AskUserQuestionTool`: the model sees askq's own schema and gets
askq's compact JSON back. The caller's turn is the agent run (`RunContext.run_id`:
pass `run_id=` to `Agent.run` to know it up front, and `seam.abort_turn(run_id)` to
abort); the tool-call id, scoped by the run, is the idempotency key; cancelling the
run cancels the call, which withdraws the question.

Errors follow pydantic-ai's convention: invalid arguments are a `ModelRetry` (the model
corrects them and calls again), every other failure (NO_ANSWERER, ABORTED,
DELEGATED_CALLER, TIMED_OUT) a `ToolFailed` the model reads and adapts to.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ModelRetry, RunContext, Tool
from pydantic_ai.exceptions import ToolFailed

from .._errors import ErrorCode
from .._models import Caller
from .._tool import AskUserQuestionTool, input_schema


def ask_user_question_tool(
    tool: AskUserQuestionTool, *, agent_id: str = "pydantic-ai", owner: str | None = None
) -> Tool[Any]:
    """The tool for `Agent(tools=[...])`, asking as `agent_id` (owned by `owner`, if a
    sub-agent)."""

    async def ask_user_question(ctx: RunContext[Any], **args: Any) -> str:
        turn = ctx.run_id or "pydantic-ai"
        result = await tool.execute(
            args,
            Caller(agent_id=agent_id, turn_id=turn, owner=owner),
            tool_call_id=f"pydantic-ai:{turn}:{ctx.tool_call_id}" if ctx.tool_call_id else None,
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
