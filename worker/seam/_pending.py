"""One ask's life (`ask`, a `PendingAsk` each): its request built, its reply expected,
the ask published, waited on, timed out; withdrawn if the caller gives up.

REDIS_UNAVAILABLE means the question was not published: only a connection that could
not be made (NotConnected), or Redis refusing the ask because it is full (a script is
refused whole, `_full.py`), proves that. When Redis stops answering after the ask was
sent (a timeout, a connection lost with the reply), the script may have run, so the
ask is sent again, marked as a repeat, until Redis answers (`_resend.py`: for at most
its window); a repeat of a request that exists attaches to it, and one whose request
settled and expired meanwhile gets its settlement: a repeat never asks anew once the
first send may have created the request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..protocol._build import build_request, timeout_settlement
from ..protocol._checks import duration_ms
from ..protocol._errors import AskError, ErrorCode
from ..protocol._messages import WITHDRAWN_MESSAGE
from ..protocol._models import Answers, AskInput, AskRequest, Caller, Question, Settlement
from ..protocol._replies import Reply, ScriptReply, refusal
from ..protocol._tracing import ask_span
from ..protocol._types import AbortSignal, OnTimeout
from ..redis._connections import CONNECTION_ERRORS
from ..redis._full import episode, is_full
from ..redis._outage import outage
from ..redis._resend import FIRST_PAUSE, MAX_PAUSE, never_sent, window_over
from ..redis._scripts import AskSend, RequestFacts
from ._caller import CallerProcess

log = logging.getLogger("askq.seam")

MAX_HOPS = 8  # OWNER / REDIRECT / GONE in a row: more means the registry keeps changing
FIRST_WAIT, MAX_WAIT = 0.05, 0.5  # asking again while a lost registry fills up (WAIT)


def fingerprint(request: AskRequest) -> str:
    """What makes a repeated idempotent ask 'the same ask': its questions and scope."""
    body = json.dumps(
        [[q.model_dump(by_alias=True) for q in request.questions], request.scope], sort_keys=True
    )
    return hashlib.sha256(body.encode()).hexdigest()


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


class PendingAsk:
    """One ask, from expecting its reply to its outcome. `request_id` and `future`
    follow the request it ends up waiting on (another ask's, after a REDIRECT).

    It keeps the request as the JSON it sends and the few ids its keys are made of, not
    as models: 100,000 asks pending in one process each hold one of these (the models of
    a request are ~2.5 KB; its JSON ~0.5 KB)."""

    # One per pending ask, 100,000 of them in a busy process: no __dict__ each.
    __slots__ = (
        "asking",
        "request_id",
        "first_id",
        "inbox",
        "maybe_sent",
        "first_try",
        "future",
        "_payload",
        "_turn",
        "_agent",
        "_claimed_owner",
        "_idempotency",
        "_fingerprint",
        "_owner",
        "_mode",
        "_gone",
        "_timeout_ms",
        "_timeout_body",
    )

    def __init__(
        self, asking: CallerProcess, request: AskRequest, timeout_ms: int, body: str
    ) -> None:
        self.asking = asking
        self.request_id = self.first_id = request.id
        self.inbox = asking.inbox
        self.maybe_sent = False  # a send of this request id may have run
        self.first_try = 0.0  # when it was first sent (monotonic; 0: not yet)
        caller = request.caller
        self._payload = request.model_dump_json(by_alias=True, exclude_defaults=True)
        self._turn, self._agent = caller.turn_id, caller.agent_id
        self._claimed_owner = caller.owner or ""
        self._idempotency = request.idempotency
        self._fingerprint = fingerprint(request) if request.idempotency is not None else ""
        self._owner = caller.owner or asking.agents.get(caller.agent_id) or ""
        self._mode = "new"
        self._gone = ""
        self._timeout_ms = timeout_ms
        self._timeout_body = body
        self.future: asyncio.Future[Settlement] = asking.waiter.expect(request.id)
        asking.keep_alive()  # heartbeat this caller process while the ask is out

    def facts(self) -> RequestFacts | None:
        """Its request's key facts, when it waits on the request it asked (not on one an
        idempotency key named: that one's facts are in Redis)."""
        if self.request_id != self.first_id:
            return None
        return RequestFacts(self.inbox, self._turn, self._idempotency)

    def forget(self) -> None:
        """This ask no longer waits (it failed, settled at once, or was cancelled)."""
        self.asking.waiter.forget(self.request_id, self.future)

    def _switch(self, request_id: str, mode: str) -> None:
        self.forget()
        self.request_id, self._mode, self.maybe_sent = request_id, mode, False
        self.first_try = 0.0
        self.future = self.asking.waiter.expect(request_id)

    async def publish(self, signal: AbortSignal | None) -> ScriptReply:
        """Run ask.lua until it gives an outcome: declaring the owner it names (OWNER),
        on the request the index names (REDIRECT) or on a new one (GONE), and again
        after a send whose reply was lost."""
        hops, pause, wait = 0, FIRST_PAUSE, FIRST_WAIT
        while True:
            try:
                async with self.asking.publishing:  # bounded: see Asking.publishing
                    if signal is not None and signal.is_set() and not self.maybe_sent:
                        raise AskError(ErrorCode.ABORTED, WITHDRAWN_MESSAGE)
                    if not self.first_try:
                        self.first_try = time.monotonic()
                    reply = await self.asking.scripts.ask(self._send())
            except AskError as exc:
                if exc.code is not ErrorCode.REDIS_UNAVAILABLE:
                    raise
                if not self.maybe_sent and never_sent(exc):
                    raise  # never sent: nothing was published
                if not self.maybe_sent and is_full(exc):
                    raise  # refused whole (Redis is full): nothing was published
                self.maybe_sent = True
                over = window_over(self.first_try, exc)
                if over is not None:
                    raise over from exc.__cause__  # (withdrawn in the background: ask())
                if not is_full(exc):  # (a full Redis is said once an episode: _full.py)
                    outage.failed("an ask", exc)  # once per outage, not per ask and try
                log.debug(
                    "ask %s: no reply from Redis (%s); sending it again", self.request_id, exc
                )
                if await _aborted_within(signal, pause):
                    raise AskError(ErrorCode.ABORTED, WITHDRAWN_MESSAGE) from None
                pause = min(pause * 2, MAX_PAUSE)
                continue
            if pause > FIRST_PAUSE:
                outage.reached()  # it was sent again, and Redis answered
            if reply.kind is Reply.WAIT:
                # The registry was lost a moment ago and its groups register again
                # within a heartbeat: ask again (the script bounds how long).
                left = int(reply.value(0, "0")) / 1000
                if await _aborted_within(signal, min(max(left, 0.01), wait)):
                    raise AskError(ErrorCode.ABORTED, WITHDRAWN_MESSAGE)
                wait = min(wait * 2, MAX_WAIT)
                continue
            if reply.kind not in (Reply.OWNER, Reply.REDIRECT, Reply.GONE):
                if reply.kind is Reply.OFFERED:
                    episode.wrote()  # a new request: Redis takes writes
                return reply
            hops += 1
            if hops > MAX_HOPS:
                raise AskError(ErrorCode.INTERNAL, "the agent registry kept changing; try again")
            if reply.kind is Reply.OWNER:
                self._owner = reply.value(0)
            elif reply.kind is Reply.REDIRECT:
                self._switch(reply.value(0), "attach")
            else:  # GONE: the request the index named expired; ask anew
                self._gone = self.request_id
                self._switch(self.first_id, "new")

    def _send(self) -> AskSend:
        asking = self.asking
        return AskSend(
            turn_id=self._turn,
            agent_id=self._agent,
            claimed_owner=self._claimed_owner,
            idempotency=self._idempotency,
            request_id=self.request_id,
            payload_json=self._payload,
            inbox=self.inbox,
            owner=self._owner,
            timeout_ms=self._timeout_ms,
            timeout_settlement=self._timeout_body,
            fingerprint=self._fingerprint,
            mode=self._mode,
            resent=self.maybe_sent,
            gone=self._gone,
            caller_ttl_ms=duration_ms(asking.settings.caller_ttl, "caller_ttl"),
            process=asking.process_id,
        )

    async def wait(self, signal: AbortSignal | None) -> Settlement:
        """Until the request settles; the turn's signal withdraws it (an answer that
        landed first is still the answer), and so does this task's cancellation."""
        future, asking = self.future, self.asking
        try:
            if signal is not None:
                fired = asyncio.ensure_future(signal.wait())
                try:
                    await asyncio.wait({future, fired}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    fired.cancel()
                if not future.done() and not await asking.withdraw(
                    self.request_id, self.facts()
                ):
                    # Redis out of reach: the withdrawal lands once it is back; the
                    # turn is over now.
                    raise AskError(ErrorCode.ABORTED, WITHDRAWN_MESSAGE)
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                await asking.withdraw(self.request_id, self.facts())
            raise
        finally:
            if not future.done():
                self.forget()

    async def time_out(self) -> None:
        """The ask's own timeout: fire it (Redis unreachable: again, until it fires or
        the ask ends), so timeouts hold without a sweeper, through an outage too."""
        pause = 0.05
        while not self.future.done():
            try:
                reply = await self.asking.scripts.fire(
                    f"timeout|{self.request_id}", self.facts()
                )
                if reply.kind is not Reply.FIRED:
                    # Fired by someone else (its settlement is on its way), or the
                    # request is gone: either way this ask must end.
                    await self.asking.waiter.recheck(self.asking.redis, [self.request_id])
                return
            except (AskError, *CONNECTION_ERRORS) as exc:
                if isinstance(exc, AskError) and exc.code is not ErrorCode.REDIS_UNAVAILABLE:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)


async def ask(
    process: CallerProcess,
    questions: AskInput | Mapping[str, Any] | Sequence[Question | Mapping[str, Any]] | str,
    caller: Caller,
    *,
    scope: Mapping[str, str] | None = None,
    signal: AbortSignal | None = None,
    timeout: float | None = None,
    on_timeout: OnTimeout = "fail",
    default: Any = None,
    idempotency_key: str | None = None,
    on_published: Callable[[str], None] | None = None,
    new_id: Callable[[], str],
) -> Answers:
    """One ask, from its request built to its outcome: published (`PendingAsk.publish`),
    then waited on, withdrawn if the caller gives up, and timed out by the caller
    itself. `Asking.ask` returns this coroutine as it is (no frame around it)."""
    # One span from here to the settlement (a no-op context without the otel extra);
    # its traceparent travels in the request, so the answerers' spans join it. In
    # this coroutine, not one around it: a frame per pending ask more is megabytes.
    with ask_span(caller.agent_id, caller.turn_id) as span:
        request = build_request(
            questions,
            caller,
            scope,
            idempotency_key=idempotency_key,
            trace=span.traceparent if span is not None else None,
            request_id=new_id(),
        )
        if span is not None:
            span.request(request.id)
        timeout_ms = duration_ms(timeout, "timeout") if timeout is not None else 0
        body = timeout_settlement(request, timeout, on_timeout, default)
        if signal is not None and signal.is_set():
            raise AskError(ErrorCode.ABORTED, WITHDRAWN_MESSAGE)
        pending = PendingAsk(process, request, timeout_ms, body)
        # From here on the ask is its PendingAsk: a pending ask keeps no models (the
        # request's are ~2.5 KB of 7 a pending ask held; the caller's input may be
        # released too).
        agent_id = caller.agent_id
        del request, questions, caller, default
        try:
            reply = await pending.publish(signal)
        except asyncio.CancelledError:
            # Cancelled while publishing: the request may be out there with nobody
            # waiting for it, so withdraw it (a no-op if it never got published).
            pending.forget()
            await process.withdraw(pending.request_id, pending.facts())
            raise
        except BaseException:
            pending.forget()
            if pending.maybe_sent:  # it may be live, with nobody waiting for it now
                await process.withdraw(pending.request_id, pending.facts())
            raise
        if reply.kind is Reply.SETTLED:
            pending.forget()
            if not reply.value(0):
                raise AskError(
                    ErrorCode.NOT_FOUND, f"request {pending.request_id!r} settled and expired"
                )
            # Out and already settled (a repeat after a lost reply, or a key naming a
            # settled request): still published, so the caller learns its id.
            if on_published is not None:
                on_published(pending.request_id)
            return Settlement.model_validate_json(reply.value(0)).result()
        if reply.kind not in (Reply.OFFERED, Reply.ATTACHED):
            pending.forget()
            raise refusal(
                reply,
                pending.request_id,
                agent_id=agent_id,
                idempotency_key=idempotency_key,
            )
        if pending.request_id != pending.first_id:
            # Reattached to an earlier ask's request: its facts are in Redis, and
            # what this process may have cached of it names the old inbox. (A new
            # request's facts are not cached: its PendingAsk holds them.)
            process.requests.forget(pending.request_id)
        del reply
        process.waiter.published(pending.request_id)
        if on_published is not None:
            on_published(pending.request_id)
        timer = None
        if timeout is not None:
            # The caller enforces its own timeout (the sweeper does too, for a caller
            # that is gone); firing is guarded, so only one of them does.
            timer = asyncio.get_running_loop().call_later(
                timeout, lambda: process.spawn(pending.time_out())
            )
        try:
            return (await pending.wait(signal)).result()
        finally:
            if timer is not None:
                timer.cancel()
