"""Publishing one ask: `ask.lua` run until it gives an outcome.

The script may first ask for other keys: the owner's agent key, when the registry
names an owner the caller did not declare (OWNER); the request the idempotency index
names (REDIRECT); a fresh request, when the one the index named has expired (GONE).

And the send may fail two ways. When the connection could not even be made, nothing
was sent: the ask fails REDIS_UNAVAILABLE, and nobody can see the question. When it
failed later (a timeout, a connection lost with the reply), the script may have run:
the question may be live. Then the ask is sent again, marked as a repeat, until Redis
answers; a repeat of a request that exists attaches to it. So an ask never reports a
failure while its question is answerable.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._connections import NotConnected
from ._errors import ABORTED_MESSAGE, AskError, ErrorCode
from ._models import AskRequest, Settlement

if TYPE_CHECKING:
    from ._seam import AbortSignal, Seam

log = logging.getLogger("askq.seam")

MAX_HOPS = 8  # OWNER / REDIRECT / GONE in a row: more means the registry keeps changing
RESEND_FIRST = 0.05
RESEND_MAX = 2.0


TAKEN_OVER = Settlement(
    state="CANCELLED",
    code=ErrorCode.ABORTED,
    message="Another call with the same idempotency key took over this question; its"
    " answer goes to that call.",
    by="idempotency key",
).model_dump_json(exclude_none=True)


def idempotency_digest(key: str) -> str:
    """The idempotency key as the request's index knows it (`Keys.idem`)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def fingerprint(request: AskRequest) -> str:
    """What makes a repeated idempotent ask 'the same ask': its questions and scope."""
    body = json.dumps(
        [[q.model_dump(by_alias=True) for q in request.questions], request.scope], sort_keys=True
    )
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class AskKeys:
    """What the keys of an ask depend on, besides its request id."""

    inbox: str
    turn: str
    idem: str | None
    owner: str
    agent: str
    prev_inbox: str | None  # an idempotent ask: where the request replies now


class Publish:
    """One ask on its way into Redis. `request_id` and `future` follow the request the
    ask ends up waiting on (another one's, after a REDIRECT)."""

    def __init__(self, seam: Seam, request: AskRequest, timeout_ms: int, timeout_body: str) -> None:
        self.seam = seam
        self.request = request
        self.inbox = seam.keys.inbox(seam.process_id)
        self.request_id = request.id
        self.maybe_sent = False  # a send of this request id may have run
        caller = request.caller
        self._owner = caller.owner or seam._agents.get(caller.agent_id) or ""
        self._mode = "new"
        self._gone = ""
        self._timeout_ms = timeout_ms
        self._timeout_body = timeout_body
        self.future: asyncio.Future[Settlement] = seam._waiter.expect(request.id)
        seam._keep_alive()  # heartbeat this caller process while the ask is out

    def forget(self) -> None:
        """This ask no longer waits (it failed, settled at once, or was cancelled)."""
        self.seam._waiter.forget(self.request_id, self.future)

    def _switch(self, request_id: str, mode: str) -> None:
        self.forget()
        self.request_id, self._mode, self.maybe_sent = request_id, mode, False
        self.future = self.seam._waiter.expect(request_id)

    async def run(self, signal: AbortSignal | None) -> list[str]:
        hops, pause = 0, RESEND_FIRST
        while True:
            try:
                result = await self._send()
            except AskError as exc:
                if exc.code is not ErrorCode.REDIS_UNAVAILABLE:
                    raise
                if not self.maybe_sent and isinstance(exc.__cause__, NotConnected):
                    raise  # never sent: nothing was published
                self.maybe_sent = True
                log.warning(
                    "ask %s: no reply from Redis (%s); sending it again", self.request_id, exc
                )
                if await _aborted_within(signal, pause):
                    raise AskError(ErrorCode.ABORTED, ABORTED_MESSAGE) from None
                pause = min(pause * 2, RESEND_MAX)
                continue
            kind = result[0]
            if kind not in ("OWNER", "REDIRECT", "GONE"):
                return result
            hops += 1
            if hops > MAX_HOPS:
                raise AskError(ErrorCode.INTERNAL, "the agent registry kept changing; try again")
            if kind == "OWNER":
                self._owner = result[1]
            elif kind == "REDIRECT":
                self._switch(result[1], "attach")
            else:  # GONE: the request the index named expired; ask anew
                self._gone = self.request_id
                self._switch(self.request.id, "new")

    async def _send(self) -> list[str]:
        request, seam = self.request, self.seam
        caller = request.caller
        idempotent = request.idempotency is not None
        keys = AskKeys(
            inbox=self.inbox,
            turn=caller.turn_id,
            idem=request.idempotency,
            owner=self._owner,
            agent=caller.agent_id,
            # An idempotent ask of a request that replies elsewhere comes back STALE;
            # the seam then reads where it replies and asks to reattach.
            prev_inbox=self.inbox if idempotent else None,
        )
        return await seam._run(
            "ask",
            self.request_id,
            [
                request.model_dump_json(by_alias=True, exclude_defaults=True),
                caller.turn_id,
                caller.agent_id,
                caller.owner or "",
                seam.process_id,
                int(seam.settings.caller_ttl * 1000),
                self._timeout_ms,
                self._timeout_body,
                fingerprint(request) if idempotent else "",
                TAKEN_OVER,
                self._mode,
                "1" if self.maybe_sent else "0",
                self._gone,
                seam.keys.agent(""),
            ],
            ask=keys,
        )


async def _aborted_within(signal: AbortSignal | None, seconds: float) -> bool:
    """Wait `seconds`; True at once if the turn's signal fires meanwhile."""
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    if signal.is_set():
        return True
    try:
        await asyncio.wait_for(signal.wait(), seconds)
    except TimeoutError:
        return False
    return True
