"""`ask_user_question` as a LangChain tool, for LangChain agents and LangGraph's
`ToolNode` (`pip install 'askq[langchain]'`).

A thin adapter over `AskUserQuestionTool`: a `BaseTool` whose `args_schema` is askq's
own JSON schema and whose result is askq's compact JSON. Failures are raised as
`ToolException` with `handle_tool_error=True`, LangChain's convention: the model gets a
`ToolMessage` with the error text and `status="error"`.

The caller's turn, from the run's config: `configurable["askq_turn_id"]` if given,
else the LangGraph thread (`configurable["thread_id"]`), else the tool's own run id.
Aborting a thread's turn (`seam.abort_turn(thread_id)`) also refuses that thread's
later asks until `ASKQ_ABORT_TTL` passes: pass an `askq_turn_id` per user message to
abort one run and keep the thread. The tool-call id, scoped by the turn, is the
idempotency key. Cancelling the run (the graph's task) withdraws the question.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ArgsSchema, BaseTool, ToolException
from pydantic import ConfigDict, Field

from .._models import Caller
from .._tool import TOOL_DESCRIPTION, TOOL_NAME, AskUserQuestionTool, input_schema

# The id of the tool call being run: LangChain hands it to `arun`, not to `_arun`.
_tool_call_id: ContextVar[str | None] = ContextVar("askq_langchain_tool_call", default=None)


def config_turn(config: RunnableConfig, fallback: str) -> str:
    configurable = config.get("configurable") or {}
    for key in ("askq_turn_id", "thread_id"):
        if configurable.get(key):
            return str(configurable[key])
    return fallback


class AskUserQuestionLangChainTool(BaseTool):
    """The tool for `create_agent(tools=[...])` or `ToolNode([...])`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = TOOL_NAME
    description: str = TOOL_DESCRIPTION
    args_schema: ArgsSchema | None = Field(default_factory=input_schema)
    handle_tool_error: bool = True  # the error text goes to the model as a ToolMessage

    askq: AskUserQuestionTool
    agent_id: str = "langchain"
    owner: str | None = None

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _tool_call_id.set(kwargs.get("tool_call_id"))
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _tool_call_id.reset(token)

    async def _arun(
        self,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **args: Any,
    ) -> str:
        run_id = str(run_manager.run_id) if run_manager is not None else "langchain"
        turn = config_turn(config, run_id)
        call = _tool_call_id.get()
        result = await self.askq.execute(
            args,
            Caller(agent_id=self.agent_id, turn_id=turn, owner=self.owner),
            tool_call_id=f"langchain:{turn}:{call}" if call else None,
        )
        if result.is_error:
            raise ToolException(result.content)
        return result.content

    def _run(self, *args: Any, **kwargs: Any) -> str:
        raise NotImplementedError("ask_user_question is async: use ainvoke / an async graph")


def ask_user_question_tool(
    tool: AskUserQuestionTool, *, agent_id: str = "langchain", owner: str | None = None
) -> AskUserQuestionLangChainTool:
    """The tool, asking as `agent_id` (owned by `owner`, if a sub-agent)."""
    return AskUserQuestionLangChainTool(askq=tool, agent_id=agent_id, owner=owner)
