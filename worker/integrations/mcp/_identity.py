"""Who asks, in which turn, and what makes a re-issued call "the same call".

The agent and owner come from the server's settings, or from the connection when it
names them (`_meta` keys `io.askq/agent`, `io.askq/owner`, `io.askq/turn`,
`io.askq/toolCallId`, or the HTTP headers `Askq-Agent`, `Askq-Owner`, `Askq-Turn`).
The turn is, in order: what the client names; the MCP session (`Mcp-Session-Id` on
2025-era HTTP; the one connection of a stdio server process); else the call itself
(2026-era HTTP has no session: name a turn to make `askq abort` reach several calls,
and a call re-issuable). The named turn or the session is the conversation, the run a
call id or arguments are unique in; without one a call has no idempotency key.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from askq import Caller
from askq.protocol._checks import MAX_IDEMPOTENCY_KEY, check_text
from askq.protocol._models import validate_model

from ._settings import McpSettings

META = "io.askq/"
HEADER = "askq-"


@dataclass(frozen=True)
class Who:
    """The caller of one tool call, and what stays the same when the call is re-issued
    (`conversation`: the client's turn or the session, the run its call id and
    arguments are unique in; "" when there is neither)."""

    caller: Caller
    conversation: str
    tool_call_id: str | None

    def reattach_base(self, args: Any) -> str:
        """A digest of the asking agent, the conversation and the arguments: a call
        re-issued after a dropped stream (a new JSON-RPC id) has the same one."""
        body = json.dumps(
            [self.caller.agent_id, self.conversation, args],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=str,
        )
        # surrogatepass: arguments the tool will refuse (a lone surrogate) still have a
        # digest; the ask then says what is wrong with them.
        return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _given(meta: Mapping[str, Any], headers: Mapping[str, str], name: str) -> str | None:
    value = meta.get(META + name)
    if value is None and name != "toolCallId":
        value = headers.get(HEADER + name)
    return None if value is None else str(value)


def identify(
    settings: McpSettings,
    meta: Mapping[str, Any] | None,
    request: Any,
    stdio_session: str | None,
) -> Who:
    """The caller of one call (INVALID_REQUEST naming a malformed agent, owner or turn).
    `request`: the HTTP request (None on stdio); `stdio_session`: the id of this stdio
    server's one connection."""
    headers: Mapping[str, str] = getattr(request, "headers", None) or {}
    given: Mapping[str, Any] = (meta or {}) if settings.client_identity else {}
    heard: Mapping[str, str] = headers if settings.client_identity else {}
    agent = _given(given, heard, "agent") or settings.agent_id
    owner = _given(given, heard, "owner") or settings.owner
    turn = _given(given, heard, "turn")
    session = headers.get("mcp-session-id")
    if session:
        session = f"mcp-session-{session}"
    elif request is None:
        session = stdio_session
    conversation = turn or session or ""
    caller = validate_model(
        Caller,
        {
            "agent_id": agent,
            "owner": owner,
            "turn_id": conversation or f"mcp-call-{uuid.uuid4().hex}",
        },
    )
    call = _given(given, heard, "toolCallId")
    if call is not None:
        check_text(call, META + "toolCallId", MAX_IDEMPOTENCY_KEY)
    return Who(caller, conversation, call)
