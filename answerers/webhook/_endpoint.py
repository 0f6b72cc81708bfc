"""The callback: where a receiver POSTs the answer to a question it was sent.

    POST {public_url}/webhook/<group>/answers/<request id>
    Authorization: Bearer <answer.token of the question.asked event>
    {"answers": [{"id": "...", "selected": ["..."], "custom": "..."}], "by": "alice"}

Replies are JSON, `{"status": "answered", "answers": [...]}` (200) or
`{"error": <code>, "message": <what is wrong>}`:

| status | error          | when                                                       |
|--------|----------------|------------------------------------------------------------|
| 400    | bad_request    | not a JSON object, or `by` not text                        |
| 401    | unauthorized   | no bearer token, or not this question's token (here)       |
| 404    | not_found      | another group's callback path, or not a request id         |
| 409    | already_settled| the token was used, or the question is no longer this      |
|        |                | group's (answered elsewhere, withdrawn, escalated)         |
| 413    | too_large      | a body over 1 MiB                                          |
| 422    | invalid_answer | answers that do not fit the questions (says which and why) |
| 503    | unavailable    | Redis out of reach: nothing recorded, the token still good |

Nothing a client sends can stop the endpoint: every failure is one of these replies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._serving import Endpoint as Serving

log = logging.getLogger("askq.webhook")

ANSWER_PATH = "/webhook/{group}/answers/{request_id}"
MAX_BODY = 1 << 20  # eight questions' answers of 2,000 characters each are well under


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]


def refusal(status: int, error: str, message: str) -> Reply:
    return Reply(status, {"error": error, "message": message})


OnAnswer = Callable[[str, str, str | None, Any], Awaitable[Reply]]


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Endpoint(Serving):
    log = log
    path = ANSWER_PATH
    settings = "ASKQ_WEBHOOK_HTTP_HOST/ASKQ_WEBHOOK_HTTP_PORT"
    title = "webhook callback"
    logs_path = False  # the route is a pattern

    def __init__(self, on_answer: OnAnswer, host: str, port: int) -> None:
        super().__init__(host, port)
        self._on_answer = on_answer

    async def _on_post(self, request: Request) -> Response:
        reply = await self._reply(request)
        return JSONResponse(reply.body, status_code=reply.status)

    async def _reply(self, request: Request) -> Reply:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            return refusal(413, "too_large", f"the body is over {MAX_BODY} bytes")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return refusal(413, "too_large", f"the body is over {MAX_BODY} bytes")
        try:
            raw = json.loads(body)
        except ValueError:
            raw = None
        if not isinstance(raw, dict):
            return refusal(
                400, "bad_request", 'expected a JSON object: {"answers": [...], "by": "..."}'
            )
        token = bearer(request.headers.get("authorization"))
        group = request.path_params["group"]
        request_id = request.path_params["request_id"]
        try:
            return await self._on_answer(group, request_id, token, raw)
        except Exception:  # noqa: BLE001 - a bad answer must not stop the worker
            log.exception("the webhook answer to %r failed", request_id[:80])
            return refusal(503, "unavailable", "askq could not take the answer; try again")
