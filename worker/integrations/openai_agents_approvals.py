"""Approvals for OpenAI Agents SDK tools (`pip install 'askq[openai-agents]'`).

`with_approval(tool, seam)` is a copy of a `FunctionTool` that asks a human through
askq before each call (`askq.approve`: the tool's name, the model's arguments, the
tool's own `params_json_schema` to check an edit), then runs the tool on Approve, runs
it with the human's edited arguments on an edit (telling the model so), or returns the
rejection, written for the model, as the tool's output. All of it inside the SDK's own
loop: the run neither stops nor needs resuming.

Why not the SDK's `needs_approval`: its callable answers only "pause or not". A False
runs the tool; a True ends the turn with an interruption that the application must
settle on the `RunState` and resume. Deciding through askq inside that callable could
approve, but a rejection would still be an interruption, and an edit has no place at
all; recording a rejection in the run's context needs the SDK's exact tool-call item,
which the callable is not given. Pausing the run and resuming it when the human
answers (the interruption as an askq approval) is the "waits that hold no process"
part of issue 24.

The run's id and the caller are as for `ask_user_question_tool` (`turn(ctx)`: by
default `RunConfig.trace_id`); with one, the tool-call id in it is the approval's
idempotency key, so a re-run call is not asked twice and two runs are asked apart.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from ..approvals import ApprovalTimeout, ToolAction, approve
from ..protocol._errors import AskError
from ..protocol._models import Caller
from ..seam._seam import Seam
from ..seam._tool import warn_unkeyed_once
from .openai_agents import UNKEYED_HOW, TurnOf, _unkeyed_turn, run_turn


def with_approval(
    tool: FunctionTool,
    seam: Seam,
    *,
    agent_id: str = "openai-agents",
    owner: str | None = None,
    turn: TurnOf = run_turn,
    scope: Mapping[str, str] | None = None,
    timeout: float | None = None,
    on_timeout: ApprovalTimeout = "reject",
) -> FunctionTool:
    """`tool`, gated on a human's approval of each call (see the module docstring)."""
    original = tool.on_invoke_tool

    async def invoke(ctx: ToolContext[Any], args_json: str) -> Any:
        try:
            arguments = json.loads(args_json) if args_json else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):  # the tool reports its own bad input
            return await original(ctx, args_json)
        run = turn(ctx) or None
        if run is None:
            warn_unkeyed_once("openai-agents approvals", UNKEYED_HOW)
        try:
            action = ToolAction(
                tool=tool.name, arguments=arguments, arguments_schema=tool.params_json_schema
            )
            decision = await approve(
                action,
                seam=seam,
                caller=Caller(agent_id=agent_id, turn_id=run or _unkeyed_turn(), owner=owner),
                scope=scope,
                timeout=timeout,
                on_timeout=on_timeout,
                tool_call_id=ctx.tool_call_id if run is not None else None,
                run_id=run,
            )
        except AskError as exc:  # nobody to ask, aborted...: text the model reads
            return str(exc)
        if not decision.approved:
            return decision.for_model()
        if decision.kind == "edit":
            output = await original(ctx, json.dumps(decision.arguments))
            return f"{decision.for_model()} Its result: {output}"
        return await original(ctx, args_json)

    return dataclasses.replace(tool, on_invoke_tool=invoke)
