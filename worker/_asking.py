"""The caller side: asking, waiting, withdrawing, aborting a turn, keeping agents live.

`Asking` owns what one caller process needs: the reply waiter (one blocking connection
for every pending ask), the process's heartbeat while it waits, the agents it keeps
live. Each ask is one `PendingAsk` (`_pending.py`), from expecting its reply to its
settlement or its withdrawal.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from ._checks import MAX_IDEMPOTENCY_KEY, check_text, duration_ms, parse_scope
from ._connections import CONNECTION_ERRORS, redis_errors
from ._errors import AskError, ErrorCode
from ._heartbeat import keep_beating
from ._keys import Keys
from ._messages import (
    ABORTED_MESSAGE,
    CALLER_GONE_MESSAGE,
    TIMED_OUT_MESSAGE,
    WITHDRAWN_MESSAGE,
)
from ._models import (
    Answers,
    AskInput,
    AskRequest,
    Caller,
    Question,
    Settlement,
    default_answers,
    parse_answers,
    parse_input,
)
from ._pending import PendingAsk
from ._pipeline import MAX_BATCH
from ._reasons import CancelReason
from ._replies import Reply, refusal
from ._requests import Requests
from ._scripts import RequestFacts, Scripts
from ._settings import Settings
from ._tracing import ask_span
from ._types import AbortSignal, OnTimeout
from ._waiter import ReplyWaiter

log = logging.getLogger("askq.seam")

PUBLISHING = 2 * MAX_BATCH


def idempotency_digest(key: str) -> str:
    """The idempotency key as the request's index knows it (`Keys.idem`)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def build_request(
    questions: AskInput | Mapping[str, Any] | Sequence[Question | Mapping[str, Any]] | str,
    caller: Caller,
    scope: Mapping[str, str] | None = None,
    *,
    idempotency_key: str | None = None,
    trace: str | None = None,
    request_id: str | None = None,
) -> AskRequest:
    """A validated request (INVALID_REQUEST naming what is wrong), with a new id."""
    if isinstance(questions, AskInput):
        parsed = questions
    elif isinstance(questions, Sequence) and not isinstance(questions, (str, bytes)):
        items = [q.model_dump(by_alias=True) if isinstance(q, Question) else q for q in questions]
        parsed = parse_input({"questions": items})
    else:
        parsed = parse_input(questions)
    scope_dict = parse_scope(scope)
    digest = None
    if idempotency_key is not None:
        digest = idempotency_digest(
            check_text(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY)
        )
    # A new id for every request, idempotent or not: nothing keyed by a request id (a
    # replica's cache, a channel's record of its message) can then outlive the request
    # and be taken for another one asked later with the same key.
    return AskRequest(
        id=request_id or uuid.uuid4().hex,
        questions=parsed.questions,
        scope=scope_dict,
        caller=caller,
        created_ms=int(time.time() * 1000),
        idempotency=digest,
        trace=trace,
    )


def timeout_settlement(
    request: AskRequest, timeout: float | None, on_timeout: OnTimeout, default: Any
) -> str:
    """The settlement a timeout writes, decided (and validated) at ask time."""
    if timeout is None:
        return ""
    if not timeout > 0:
        raise AskError(ErrorCode.INVALID_REQUEST, f"timeout: must be > 0 seconds, not {timeout}")
    if on_timeout == "fail":
        body = Settlement(
            state="CANCELLED", code=ErrorCode.TIMED_OUT, message=TIMED_OUT_MESSAGE, by="timeout"
        )
    elif on_timeout == "default":
        answers = parse_answers(request.questions, default_answers(request, default))
        body = Settlement(state="ANSWERED", answers=answers.answers, by="timeout", defaulted=True)
    else:
        raise AskError(
            ErrorCode.INVALID_REQUEST,
            f"on_timeout must be 'fail' or 'default', not {on_timeout!r}",
        )
    return body.model_dump_json(exclude_none=True)


class Asking:
    def __init__(
        self,
        scripts: Scripts,
        requests: Requests,
        settings: Settings,
        process_id: str,
        connect: Callable[[], Redis],
        *,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.scripts = scripts
        # A new request id (with several shards, one naming this shard: _shards.py).
        self.new_id = new_id or (lambda: uuid.uuid4().hex)
        self.requests = requests
        self.redis = scripts.redis
        self.keys: Keys = scripts.keys
        self.settings = settings
        self.process_id = process_id
        self.inbox = self.keys.inbox(process_id)  # this process's, shared by its asks
        self.waiter = ReplyWaiter(
            connect,
            self.inbox,
            self.keys.reply,
            settings.block_seconds,
            self.keys.request,
        )
        self.agents: dict[str, str | None] = {}  # agents kept live here -> their owner
        # Asks being published at once (PendingAsk.publish). A send holds its script
        # call's keys and arguments (~4 KB) until its pipeline goes out; 100,000 asks
        # started at once would hold them all at the same moment, and the process's
        # peak memory with them. Two pipelines' worth keeps Redis busy all the same.
        self.publishing = asyncio.Semaphore(PUBLISHING)
        self._beating: asyncio.Future[None] | None = None
        self._background: set[asyncio.Future[Any]] = set()

    # --- one ask -----------------------------------------------------------------------

    async def ask(
        self,
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
    ) -> Answers:
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
                request_id=self.new_id(),
            )
            if span is not None:
                span.request(request.id)
            timeout_ms = duration_ms(timeout, "timeout") if timeout is not None else 0
            body = timeout_settlement(request, timeout, on_timeout, default)
            if signal is not None and signal.is_set():
                raise AskError(ErrorCode.ABORTED, WITHDRAWN_MESSAGE)
            pending = PendingAsk(self, request, timeout_ms, body)
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
                await self.withdraw(pending.request_id, pending.facts())
                raise
            except BaseException:
                pending.forget()
                if pending.maybe_sent:  # it may be live, with nobody waiting for it now
                    await self.withdraw(pending.request_id, pending.facts())
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
                self.requests.forget(pending.request_id)
            del reply
            self.waiter.published(pending.request_id)
            if on_published is not None:
                on_published(pending.request_id)
            timer = None
            if timeout is not None:
                # The caller enforces its own timeout (the sweeper does too, for a caller
                # that is gone); firing is guarded, so only one of them does.
                timer = asyncio.get_running_loop().call_later(
                    timeout, lambda: self._spawn(pending.time_out())
                )
            try:
                return (await pending.wait(signal)).result()
            finally:
                if timer is not None:
                    timer.cancel()

    # --- withdrawing -------------------------------------------------------------------

    async def cancel(
        self,
        request_id: str,
        code: ErrorCode,
        message: str,
        *,
        by: str,
        reason: CancelReason = CancelReason.WITHDRAWN,
        facts: RequestFacts | None = None,
    ) -> bool:
        """Settle a pending request as CANCELLED; False if it had already settled.
        `facts`: its keys' facts, when the caller has them (else they are read)."""
        body = Settlement(state="CANCELLED", code=code, message=message, by=by)
        reply = await self.scripts.cancel(
            request_id,
            code.value,
            body.model_dump_json(exclude_none=True),
            by,
            reason.value,
            facts,
        )
        return reply.kind is Reply.CANCELLED

    async def withdraw(self, request_id: str, facts: RequestFacts | None = None) -> bool:
        """The caller gives up on its ask (signal, cancelled task, or a publication it
        could not confirm). Shielded, so it completes even while the caller's task is
        being cancelled. True once Redis has it (or nothing was left to withdraw);
        False when Redis is out of reach: it is then retried in the background until it
        lands, so a question nobody waits for does not stay answerable."""
        return await asyncio.shield(self._withdraw_once(request_id, facts, retry_later=True))

    async def _withdraw_once(
        self, request_id: str, facts: RequestFacts | None, *, retry_later: bool
    ) -> bool:
        try:
            await self.cancel(
                request_id, ErrorCode.ABORTED, WITHDRAWN_MESSAGE, by="caller", facts=facts
            )
        except AskError as exc:
            if exc.code is ErrorCode.REDIS_UNAVAILABLE:
                if retry_later:
                    self._spawn(self._withdraw_later(request_id, facts))
                return False
            if exc.code is not ErrorCode.NOT_FOUND:  # NOT_FOUND: it was never published
                log.warning("could not withdraw %s: %s", request_id, exc)
        return True

    async def _withdraw_later(self, request_id: str, facts: RequestFacts | None) -> None:
        pause = 0.1
        while not await self._withdraw_once(request_id, facts, retry_later=False):
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    async def abort_turn(self, turn_id: str, *, by: str = "abort") -> int:
        """Mark the turn aborted (durably, first), then cancel its pending requests.
        Returns how many this call cancelled."""
        body = Settlement(
            state="CANCELLED", code=ErrorCode.ABORTED, message=ABORTED_MESSAGE, by=by
        ).model_dump_json(exclude_none=True)
        reply = await self.scripts.abort_turn(turn_id, body, by)
        return int(reply.value(0, "0"))

    # --- liveness ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def agent(self, agent_id: str, owner: str | None = None) -> AsyncIterator[None]:
        """Keep an agent registered as live (with its owner) while the block runs."""
        key = self.keys.agent(agent_id)
        ttl_ms = duration_ms(self.settings.agent_ttl, "agent_ttl")

        async def beat() -> None:
            await renew(self.redis, key, owner or "", ttl_ms)

        with redis_errors(self.settings):
            await self.redis.set(key, owner or "", px=ttl_ms)
        self.agents[agent_id] = owner
        period = self.settings.agent_ttl / 3
        task = asyncio.create_task(_beat_later(f"agent {agent_id}", beat, period))
        try:
            yield
        finally:
            task.cancel()
            self.agents.pop(agent_id, None)
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.redis.delete(key)

    def keep_alive(self) -> None:
        """Heartbeat this caller process while it waits on asks, so the sweeper can tell
        a caller that is gone (its asks are cancelled) from one that is waiting."""
        if self._beating is not None and not self._beating.done():
            return
        key, ttl = self.keys.alive(self.process_id), self.settings.caller_ttl

        async def beat() -> None:
            await renew(self.redis, key, "1", duration_ms(ttl, "caller_ttl"))

        async def run() -> None:
            period = ttl / 3
            while self.waiter.pending:
                # Every ask marks this process live itself (ask.lua), so asks that come
                # one after another need no beat of their own: only a period with asks
                # waiting all along does (it was a SET per ask, a third of a sequential
                # caller's CPU).
                try:
                    await asyncio.wait_for(self.waiter.idle.wait(), period)
                except TimeoutError:
                    await keep_beating("caller", beat, period, stop=self.waiter.idle)
                if self.waiter.pending:
                    continue  # a new ask came in meanwhile (and marked the process live)
                # Nothing left to wait on: leave no trace (the script keeps the keys if
                # an ask got in meanwhile, and so does this loop).
                with contextlib.suppress(AskError):
                    await self.forget_caller()

        self._beating = asyncio.ensure_future(run())

    async def forget_caller(self, process_id: str | None = None) -> None:
        """Unregister a caller process with no ask pending (lua/forget_caller): this one,
        as it leaves (a process with asks pending is kept)."""
        await self.scripts.forget_caller(process_id or self.process_id)

    async def reap_caller(self, process_id: str) -> int | None:
        """The sweeper, for a caller process whose heartbeat lapsed: its pending asks
        cancelled (by "caller gone") and the process forgotten, in one step that first
        checks again that it is not live (lua/reap_caller). Returns how many it
        cancelled; None when the process is live again (it asked meanwhile)."""
        body = Settlement(
            state="CANCELLED", code=ErrorCode.ABORTED, message=CALLER_GONE_MESSAGE, by="caller gone"
        ).model_dump_json(exclude_none=True)
        reply = await self.scripts.reap_caller(
            process_id,
            ErrorCode.ABORTED.value,
            body,
            "caller gone",
            CancelReason.CALLER_GONE.value,
        )
        if reply.kind is Reply.LIVE:
            return None
        return int(reply.value(0, "0"))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def aclose(self) -> None:
        beating = self._beating is not None
        for task in [*self._background, *filter(None, [self._beating])]:
            task.cancel()
        if beating and not self.waiter.pending:
            with contextlib.suppress(Exception):
                await self.forget_caller()  # a clean exit leaves no trace
        await self.waiter.aclose()


async def renew(redis: Redis, key: str, value: str, ttl_ms: int) -> None:
    """A heartbeat key live for `ttl_ms` more: its expiry renewed (PEXPIRE adds no data,
    so a full Redis takes it, and a process is not taken for gone because Redis was
    full: `_full.py`), or written anew once it lapsed."""
    if not await redis.pexpire(key, ttl_ms):
        await redis.set(key, value, px=ttl_ms)


async def _beat_later(
    name: str, beat: Callable[[], Coroutine[Any, Any, None]], period: float
) -> None:
    await asyncio.sleep(period)  # the first beat was written already
    await keep_beating(name, beat, period)
