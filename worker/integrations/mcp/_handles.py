"""Handle mode: for clients whose tool timeout is short and who reset nothing on
progress. `ask_user_question` publishes the question and returns a handle at once (or
the outcome, when it comes within `first_wait`: an error, an answer by rules);
`get_user_answer(handle, wait_seconds)` waits up to a bound and returns the answers,
or "still pending".

The trade-off: the model must poll (each poll a model turn, tokens and latency), and a
question is no longer tied to the call that asked it: cancelling a poll leaves the
question open; it ends when answered, when its turn is aborted (`askq abort`), or when
the server process that waits on it is gone (the sweeper cancels it).

A handle is askq's idempotency key for the question, so any replica can take a poll:
one that does not wait on it already attaches to it through Redis.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

from askq import AskError, AskUserQuestionTool, ErrorCode, ToolResult

from ._identity import Who
from ._settings import McpSettings

GET_TOOL_NAME = "get_user_answer"
HANDLE = re.compile(r"^[0-9a-f]{32}$")
PUBLISHED_POLL = 0.01  # seconds between looks for a handle's question being published
KEEP_DONE = 600.0  # seconds an outcome nobody fetched stays in memory

GET_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "handle": {"type": "string", "description": "What ask_user_question returned."},
        "wait_seconds": {
            "type": "number",
            "minimum": 0,
            "description": "How long to wait for the answer before returning 'still pending'.",
        },
    },
    "required": ["handle"],
    "additionalProperties": False,
}

GET_DESCRIPTION = (
    "Get the user's answer to a question asked with ask_user_question, waiting up to"
    " wait_seconds for it. Returns the answers JSON once the user has answered, or"
    ' {"handle":...,"status":"pending"} while nobody has yet: then call it again.'
)

HANDLE_NOTE = (
    " This server returns at once with a handle"
    ' ({"handle":...,"status":"pending"}); call get_user_answer with it to get the answers.'
)


def _key(handle: str) -> str:
    return f"mcp-handle:{handle}"


def pending(handle: str) -> ToolResult:
    body = {"handle": handle, "status": "pending", "message": "still pending: no answer yet"}
    return ToolResult(content=json.dumps(body, separators=(",", ":")))


class Handles:
    def __init__(self, tool: AskUserQuestionTool, settings: McpSettings) -> None:
        self.tool = tool
        self.settings = settings
        self._tasks: dict[str, asyncio.Task[ToolResult]] = {}

    async def ask(self, who: Who, args: Any) -> ToolResult:
        try:  # a malformed call gets its error now, not through a handle
            self.tool.seam.build_request(args, who.caller, self.tool.scope)
        except AskError as exc:
            return ToolResult(content=str(exc), is_error=True, code=exc.code)
        handle = uuid.uuid4().hex
        task = self._track(handle, self.tool, args, who)
        result = await self._outcome(handle, task, self.settings.first_wait)
        # A handle goes out only once its question is published, so a poll landing at
        # another replica at once finds it (a slow Redis can take longer than first_wait).
        try:
            while not task.done() and await self.tool.seam.idempotent_request(_key(handle)) is None:
                await asyncio.wait({task}, timeout=PUBLISHED_POLL)
        except AskError as exc:  # Redis out of reach: no handle to give, so no question
            task.cancel()  # (withdrawn once Redis is back, if it got published)
            return ToolResult(content=str(exc), is_error=True, code=exc.code)
        return await self._outcome(handle, task, 0) if task.done() else result

    async def get(self, arguments: dict[str, Any]) -> ToolResult:
        handle = arguments.get("handle")
        wait = arguments.get("wait_seconds", self.settings.max_wait)
        if not isinstance(handle, str) or not HANDLE.match(handle):
            return _error(ErrorCode.INVALID_REQUEST, "handle: not a handle ask_user_question gave")
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
            return _error(ErrorCode.INVALID_REQUEST, "wait_seconds: must be a number >= 0")
        wait = min(float(wait), self.settings.max_wait)
        task = self._tasks.get(handle)
        try:
            if task is None:
                task = await self._attach(handle)
            elif task.done() and (task.cancelled() or task.result().code is ErrorCode.ABORTED):
                # Ended here because a poll at another replica took the question over
                # (askq lets one call wait on a request); take it back. A question that
                # was really aborted gives its stored ABORTED again.
                task = await self._attach(handle)
        except AskError as exc:
            return ToolResult(content=str(exc), is_error=True, code=exc.code)
        result = await self._outcome(handle, task, wait)
        if result.code is ErrorCode.ABORTED and task.done():
            try:  # taken over while this poll waited: likewise
                result = await self._outcome(handle, await self._attach(handle), 0)
            except AskError as exc:
                return ToolResult(content=str(exc), is_error=True, code=exc.code)
        return result

    async def _attach(self, handle: str) -> asyncio.Task[ToolResult]:
        """Wait here on a question another replica (or an earlier run) asked."""
        seam = self.tool.seam
        request_id = await seam.idempotent_request(_key(handle))
        if request_id is None:
            raise AskError(ErrorCode.NOT_FOUND, f"handle {handle}: unknown, or expired")
        request = (await seam.request_info(request_id)).request
        args = {"questions": [q.model_dump(by_alias=True) for q in request.questions]}
        tool = AskUserQuestionTool(seam, scope=request.scope)
        return self._track(handle, tool, args, Who(request.caller, "", None))

    def _track(
        self, handle: str, tool: AskUserQuestionTool, args: Any, who: Who
    ) -> asyncio.Task[ToolResult]:
        task = asyncio.ensure_future(tool.execute(args, who.caller, idempotency_key=_key(handle)))
        self._tasks[handle] = task

        def done(_: object) -> None:
            asyncio.get_running_loop().call_later(KEEP_DONE, self._drop, handle, task)

        task.add_done_callback(done)
        return task

    def _drop(self, handle: str, task: asyncio.Task[ToolResult]) -> None:
        if self._tasks.get(handle) is task:
            del self._tasks[handle]

    async def _outcome(
        self, handle: str, task: asyncio.Task[ToolResult], wait: float
    ) -> ToolResult:
        # asyncio.wait, not wait_for: a poll that ends (or is cancelled) leaves the ask
        done, _ = await asyncio.wait({task}, timeout=wait)
        if not done:
            return pending(handle)
        if task.cancelled():
            return _error(ErrorCode.ABORTED, "this server stopped waiting on the question")
        return task.result()

    def aclose(self) -> None:
        """The server stops. Its asks end with the seam (ABORTED here); their questions
        stay answerable for ASKQ_CALLER_TTL, so a replica polling them meanwhile
        attaches, and the sweeper cancels what nobody waits on any more."""
        self._tasks.clear()


def _error(code: ErrorCode, message: str) -> ToolResult:
    return ToolResult(content=str(AskError(code, message)), is_error=True, code=code)
