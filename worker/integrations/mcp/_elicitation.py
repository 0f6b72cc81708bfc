"""The MCP elicitation bridge: for an agent that is an MCP *client*, its servers'
`elicitation/create` requests asked of a human through askq's waterfall (a terminal,
Slack, email, the web), so a headless agent's MCP servers can still ask.

    bridge = ElicitationBridge(seam, Caller(agent_id="agent-7", turn_id=turn))
    async with Client(server, elicitation_callback=bridge) as client: ...

The SDK routes both eras through the one callback: a 2025-11-25 server's
server-to-client `elicitation/create`, and a 2026-07-28 server's `input_required`
result (the client answers it and retries the call). Form mode becomes questions
(`_form.py`); an answer that does not fit the schema is asked again with the reason, up
to `attempts` times, then declined. URL mode becomes a question carrying the link as
text, for the human to open (askq never opens it): "Done" accepts, "Decline" declines.

Outcomes: `accept` with content of the requested types; `decline` when the human
declines a link, when no answerer would take the question (NO_ANSWERER), when the
agent may not ask (DELEGATED_CALLER), or when the answers never fit; `cancel` when the
ask is withdrawn (the turn aborted, the signal set) or times out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.client.session import ClientRequestContext

from askq import AbortSignal, Answer, AskError, Caller, ErrorCode, Seam

from ._form import Field, FormError, Value, form_fields

log = logging.getLogger("askq.mcp")

BATCH = 8  # askq asks at most 8 questions at once
DECLINED = (ErrorCode.NO_ANSWERER, ErrorCode.DELEGATED_CALLER)
CANCELLED = (ErrorCode.ABORTED, ErrorCode.TIMED_OUT)
DONE, DECLINE = "Done", "Decline"


class ElicitationBridge:
    """An `elicitation_callback` for the SDK's `Client` / `ClientSession`."""

    def __init__(
        self,
        seam: Seam,
        caller: Caller,
        *,
        scope: Mapping[str, str] | None = None,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        attempts: int = 3,
    ) -> None:
        """`caller`: the agent asking (its turn: `askq abort` withdraws the questions);
        `signal`: the turn's abort signal; `timeout`: seconds before it is cancelled."""
        self.seam = seam
        self.caller = caller
        self.scope = dict(scope or {})
        self.signal = signal
        self.timeout = timeout
        self.attempts = max(attempts, 1)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        try:
            if isinstance(params, types.ElicitRequestURLParams):
                return await self._url(params)
            return await self._form(params)
        except FormError as exc:
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"askq: {exc}")
        except AskError as exc:
            if exc.code in DECLINED:
                return types.ElicitResult(action="decline")
            if exc.code in CANCELLED:
                return types.ElicitResult(action="cancel")
            if exc.code is ErrorCode.INVALID_REQUEST:  # a form askq's limits refuse
                return types.ErrorData(code=types.INVALID_PARAMS, message=f"askq: {exc}")
            log.warning("elicitation not asked: %s", exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=str(exc))

    async def _ask(self, questions: list[dict[str, Any]]) -> dict[str, Answer]:
        answers = await self.seam.ask(
            {"questions": questions},
            self.caller,
            scope=self.scope,
            signal=self.signal,
            timeout=self.timeout,
        )
        return {a.id: a for a in answers.answers}

    async def _url(self, params: types.ElicitRequestURLParams) -> types.ElicitResult:
        text = (
            f"{params.message}\n\nThis needs you to open a link yourself (askq does not"
            f" open it; check it is one you expect):\n{params.url}"
        )
        question = {
            "id": "link",
            "header": "Open a link",
            "question": text[:2000],
            "options": [
                {"label": DONE, "description": "I opened the link and finished there."},
                {"label": DECLINE, "description": "I will not open it."},
            ],
        }
        answer = (await self._ask([question]))["link"]
        picked = answer.selected[0] if answer.selected else None
        if picked == DONE:
            return types.ElicitResult(action="accept")
        if picked == DECLINE:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="cancel")

    async def _form(self, params: types.ElicitRequestFormParams) -> types.ElicitResult:
        fields = form_fields(params.requested_schema)
        content: dict[str, Value | None] = {}
        for start in range(0, len(fields), BATCH):
            batch = fields[start : start + BATCH]
            got = await self._fill(params.message, batch)
            if got is None:
                return types.ElicitResult(action="decline")
            content.update(got)
        return types.ElicitResult(
            action="accept", content={k: v for k, v in content.items() if v is not None}
        )

    async def _fill(self, message: str, fields: list[Field]) -> dict[str, Value | None] | None:
        """Ask until every field's answer fits (re-asking only those that did not, with
        the reason); None once `attempts` asks left one that does not."""
        values: dict[str, Value | None] = {}
        problems: dict[str, str] = {}
        todo = fields
        for _ in range(self.attempts):
            answers = await self._ask([f.question(message, problems.get(f.name)) for f in todo])
            problems = {}
            for f in todo:
                ok, value, problem = f.value(answers[f.qid])
                if ok:
                    values[f.name] = value
                else:
                    problems[f.name] = problem or "not accepted"
            todo = [f for f in todo if f.name in problems]
            if not todo:
                return values
        return None
