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
abort one run and keep the thread.

The idempotency key is the tool-call id within the LangGraph task running the tool
(`configurable["checkpoint_ns"]`, which ends in the task's id: derived from a fresh
checkpoint id, so unique per run, and the same when a run resumes from its checkpoint
and runs the task again), else within the `askq_turn_id` given. A thread is no run
(every run of a thread repeats a test model's `call_0`), and plain LangChain has no
run id that outlives the process: there the call asks without an idempotency key
(said once in the log). Cancelling the run (the graph's task) withdraws the question.
"""

from __future__ import annotations

import uuid
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ArgsSchema, BaseTool, ToolException
from pydantic import ConfigDict, Field

from ..protocol._models import Caller
from ..seam._tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    AskUserQuestionTool,
    input_schema,
    warn_unkeyed_once,
)

# The id of the tool call being run: LangChain hands it to `arun`, not to `_arun`.
_tool_call_id: ContextVar[str | None] = ContextVar("askq_langchain_tool_call", default=None)


UNKEYED_HOW = (
    "Run it in a LangGraph graph (ToolNode), or pass"
    ' configurable["askq_turn_id"] (one per run) to make it idempotent.'
)


def config_turn(config: RunnableConfig, fallback: str) -> str:
    configurable = config.get("configurable") or {}
    for key in ("askq_turn_id", "thread_id"):
        if configurable.get(key):
            return str(configurable[key])
    return fallback


def config_run(config: RunnableConfig) -> str | None:
    """What makes a tool-call id unique: the LangGraph task running the tool (its
    checkpoint namespace ends in the task id), else the `askq_turn_id` given; None."""
    configurable = config.get("configurable") or {}
    for key in ("checkpoint_ns", "askq_turn_id"):
        if configurable.get(key):
            return str(configurable[key])
    return None


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
        own = run_manager.run_id if run_manager is not None else uuid.uuid4()
        turn = config_turn(config, str(own))
        run, call = config_run(config), _tool_call_id.get()
        if call and run is None:
            warn_unkeyed_once("langchain", UNKEYED_HOW)
        result = await self.askq.execute(
            args,
            Caller(agent_id=self.agent_id, turn_id=turn, owner=self.owner),
            tool_call_id=call if call and run is not None else None,
            run_id=run,
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
