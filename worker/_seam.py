"""The user-questions seam: the service under the tool.

`Seam` is what both sides talk to. Agents `ask` (and `abort_turn`); answerer groups
`accept`, `decline`, `release` and `answer`. Every change of a request's state is one
Lua script (see `lua/`); this module prepares their keys and turns their replies into
results or `AskError`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Literal, Protocol

from pydantic import BaseModel
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from ._connections import CONNECTION_ERRORS, blocking_client, command_client, unavailable
from ._errors import ABORTED_MESSAGE, TIMED_OUT_MESSAGE, AskError, ErrorCode
from ._heartbeat import keep_beating
from ._keys import Keys, split_groups
from ._models import (
    REQUEST_ID_PATTERN,
    TERMINAL,
    Answers,
    AskInput,
    AskRequest,
    Caller,
    Offer,
    Question,
    Settlement,
    check_request_id,
    check_text,
    default_answers,
    duration_ms,
    parse_answers,
    parse_input,
    parse_scope,
)
from ._pipeline import ScriptPipeline
from ._publish import AskKeys as _AskKeys
from ._publish import Publish as _Publish
from ._publish import idempotency_digest
from ._scripts import source
from ._settings import Settings
from ._text import quoted
from ._waiter import ReplyWaiter

log = logging.getLogger("askq.seam")

INFO_CACHE = 8192

OnTimeout = Literal["fail", "default"]


class AbortSignal(Protocol):
    """The turn's abort signal: `asyncio.Event` is one."""

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class RequestInfo(BaseModel):
    """The immutable facts of a request, cached so worker-side scripts need no lookup."""

    request: AskRequest
    inbox: str


class GroupStatus(BaseModel):
    name: str
    priority: int
    kind: str = ""
    scope: dict[str, str] = {}
    live_consumers: int
    pending: int


class RequestStatus(BaseModel):
    id: str
    state: str
    tier: int | None
    undecided: list[str]
    claimers: list[str]
    header: str
    agent: str
    turn: str
    age_seconds: float
    by: str = ""
    code: str = ""


class Status(BaseModel):
    groups: list[GroupStatus]
    requests: list[RequestStatus]


def _delegated(caller: Caller, owner: str) -> AskError:
    return AskError(
        ErrorCode.DELEGATED_CALLER,
        f"Agent {caller.agent_id!r} is a sub-agent owned by live agent {owner!r}, so it"
        " cannot ask the user. Do not call ask_user_question again: put your unresolved"
        " questions and decisions in your final result, and the agent that owns you will"
        " take them to the user.",
    )


async def _beat_later(name: str, beat: Callable[[], Awaitable[None]], period: float) -> None:
    await asyncio.sleep(period)  # the first beat was written already
    await keep_beating(name, beat, period)


class Seam:
    """The async seam client. Use it as an async context manager::

        async with Seam.from_url("redis://localhost:6379/0") as seam:
            answers = await seam.ask(questions, Caller(agent_id="a1", turn_id="t1"))

    A seam built from an existing client opens its own bounded pool with that client's
    connection settings (so 10,000 pending asks share a handful of connections).
    """

    def __init__(
        self, redis: Redis | None = None, *, settings: Settings | None = None, **overrides: Any
    ) -> None:
        self.settings = settings or Settings(**overrides)
        if settings is not None and overrides:
            self.settings = settings.model_copy(update=overrides)
        self.keys = Keys(self.settings.prefix)
        self._source = redis
        self.process_id = uuid.uuid4().hex
        self.client_name = f"askq-{self.process_id[:12]}"
        self.redis = command_client(redis, self.settings, self.client_name)
        self._scripts: dict[str, AsyncScript] = {}
        self._pipeline = ScriptPipeline(self.redis)
        self._waiter = ReplyWaiter(
            self.blocking_connection,
            self.keys.inbox(self.process_id),
            self.keys.reply,
            self.settings.block_seconds,
            self.keys.request,
        )
        self._tier_cache: list[str] | None = None
        self._background: set[asyncio.Future[Any]] = set()
        self._beating: asyncio.Future[None] | None = None
        self._infos: OrderedDict[str, RequestInfo] = OrderedDict()
        self._agents: dict[str, str | None] = {}

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> Seam:
        return cls(settings=Settings(redis_url=url, **overrides))

    def blocking_connection(self) -> Redis:
        """A new single-connection client for one blocking loop."""
        return blocking_client(self._source, self.settings, self.client_name)

    async def __aenter__(self) -> Seam:
        await self.ping()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def ping(self) -> None:
        with self.redis_errors():
            await self.redis.ping()

    async def aclose(self) -> None:
        beating = self._beating is not None
        for task in [*self._background, *filter(None, [self._beating])]:
            task.cancel()
        if beating and not self._waiter.pending:
            with contextlib.suppress(Exception):
                await self.forget_caller()  # a clean exit leaves no trace
        await self._waiter.aclose()
        with contextlib.suppress(Exception):
            await self._pipeline.aclose()
        await self.redis.aclose(close_connection_pool=True)

    async def forget_caller(self, process_id: str | None = None) -> None:
        """Unregister a caller process with no ask pending (lua/forget_caller): this one,
        as it leaves, or (the sweeper) another one whose heartbeat expired."""
        own = process_id is None
        process = self.process_id if process_id is None else process_id
        k = self.keys
        await self.call(
            "forget_caller",
            keys=[k.callers, k.alive(process), k.asked(process)],
            args=[process, "1" if own else "0"],
        )

    @contextlib.contextmanager
    def redis_errors(self) -> Iterator[None]:
        """Turn a lost or unreachable server into one clear AskError naming the URL."""
        try:
            yield
        except CONNECTION_ERRORS as exc:
            # The cause is kept: it tells whether the command was sent (NotConnected).
            raise unavailable(self.settings, exc) from exc

    # --- scripts -------------------------------------------------------------------

    def script(self, name: str) -> AsyncScript:
        """The named Lua script (lua/<name>.lua), registered once per client."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.redis.register_script(source(name))
        return script

    async def call(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run the named script, pipelined with the process's other script calls."""
        return await self._pipeline.call(self.script(name), keys, args)

    async def tier_streams(self, refresh: bool = False) -> list[str]:
        """The stream keys of every tier in the registry (scripts must declare them)."""
        if self._tier_cache is None or refresh:
            priorities = {int(p) for p in await self.redis.hvals(self.keys.groups)}  # type: ignore[misc]
            self._tier_cache = [self.keys.tier(p) for p in sorted(priorities)]
        return self._tier_cache

    async def _run(
        self,
        name: str,
        request_id: str,
        extra: Sequence[str | int],
        *,
        ask: _AskKeys | None = None,
    ) -> list[str]:
        """Run a per-request script (layout in lua/request.lua): with the request's own
        inbox, turn and idempotency index, or for `ask`, those of the ask. On STALE, the
        registry and the request's facts are read again (a tier was added, or the
        request's caller moved) and it runs again."""
        k = self.keys
        prev_inbox = ask.prev_inbox if ask is not None else None
        for attempt in range(5):
            with self.redis_errors():
                tiers = await self.tier_streams(refresh=attempt > 0)
                if ask is None:
                    if attempt > 0:  # the request's caller may have moved (reattached)
                        self._infos.pop(request_id, None)
                    info = await self.request_info(request_id)
                    inbox, turn = info.inbox, info.request.caller.turn_id
                    idem, owner, agent = info.request.idempotency, "", ""
                else:
                    inbox, turn, idem = ask.inbox, ask.turn, ask.idem
                    owner, agent = ask.owner, ask.agent
            process = k.process_of(inbox)
            keys = [
                k.request(request_id),
                k.reply(request_id),
                inbox,
                k.turn(turn),
                k.pending,
                k.events,
                k.groups,
                k.live,
                k.aborted(turn),
                k.agent(owner),
                k.group_info,
                k.timers,
                k.wake,
                k.asked(process),
                k.callers,
                k.alive(process),
                k.asked(k.process_of(prev_inbox or inbox)),
                prev_inbox or inbox,
                k.payload(request_id),
                k.timeout_body(request_id),
                k.idem(idem),
                k.agent(agent),
                *tiers,
            ]
            args = [
                k.tier_prefix,
                self.settings.settled_ttl,
                self.settings.events_maxlen,
                request_id,
                *extra,
            ]
            with self.redis_errors():
                result: list[str] = await self.call(name, keys, args)
            if result[0] != "STALE":
                return result
            if prev_inbox is not None:  # an idempotent ask: read where it replies now
                with self.redis_errors():
                    prev_inbox = await self.redis.hget(k.request(request_id), "inbox") or inbox  # type: ignore[misc]
        raise AskError(ErrorCode.INTERNAL, "the answerer registry kept changing; try again")

    # --- the agent side -------------------------------------------------------------

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
    ) -> Answers:
        """Publish the questions and block until they are answered, or raise AskError.

        `timeout` (seconds; default none): then `on_timeout="fail"` raises TIMED_OUT, and
        `"default"` settles with `default` (answers in the tool's output shape), or with
        each question's recommended option, marked `defaulted` in the result.
        `idempotency_key` (e.g. the tool-call id): asking again with the same key while
        the request is pending waits on that same request; after it settled, returns
        its settlement (while it is kept) instead of asking the human again.

        REDIS_UNAVAILABLE means the question was not published. When Redis stops
        answering after the ask was sent (its reply lost), whether it was published is
        unknown: the ask is sent again, idempotently, until Redis answers, so it never
        fails while a human can still see the question.
        """
        request = self.build_request(questions, caller, scope, idempotency_key=idempotency_key)
        timeout_ms = duration_ms(timeout, "timeout") if timeout is not None else 0
        timeout_body = self._timeout_settlement(request, timeout, on_timeout, default)
        if signal is not None and signal.is_set():
            raise AskError(ErrorCode.ABORTED, ABORTED_MESSAGE)
        publish = _Publish(self, request, timeout_ms, timeout_body)
        try:
            result = await publish.run(signal)
        except asyncio.CancelledError:
            # Cancelled while publishing: the request may be out there with nobody
            # waiting for it, so withdraw it (a no-op if it never got published).
            publish.forget()
            await self._withdraw(publish.request_id)
            raise
        except BaseException:
            publish.forget()
            if publish.maybe_sent:  # it may be live, with nobody waiting for it now
                await self._withdraw(publish.request_id)
            raise
        request_id, future = publish.request_id, publish.future
        if result[0] == "SETTLED":
            publish.forget()
            if not result[1]:
                raise AskError(ErrorCode.NOT_FOUND, f"request {request_id!r} settled and expired")
            return Settlement.model_validate_json(result[1]).result()
        if result[0] not in ("OFFERED", "ATTACHED"):
            publish.forget()
            if result[0] == "ABORTED":
                raise AskError(ErrorCode.ABORTED, ABORTED_MESSAGE)
            if result[0] == "DELEGATED_CALLER":
                raise _delegated(caller, result[1])
            if result[0] == "NO_ANSWERER":
                raise AskError(ErrorCode.NO_ANSWERER, result[1])
            if result[0] == "EXISTS":
                raise AskError(
                    ErrorCode.INVALID_REQUEST,
                    f"idempotency key {quoted(idempotency_key or '')} was already used for"
                    " other questions; use a new key for a new ask",
                )
            raise AskError(ErrorCode.INTERNAL, f"unexpected reply to ask: {result}")
        if request_id == request.id:
            self.remember(RequestInfo(request=request, inbox=publish.inbox))
        else:  # reattached to an earlier ask's request: its own facts are in Redis
            self._infos.pop(request_id, None)
        self._waiter.published(request_id)
        timer = None
        if timeout is not None:
            # The caller enforces its own timeout (the sweeper does too, for a caller
            # that is gone); firing is guarded, so only one of them does.
            timer = asyncio.get_running_loop().call_later(
                timeout, lambda: self._spawn(self._time_out(request_id, future))
            )
        try:
            return (await self._wait(request_id, future, signal)).result()
        finally:
            if timer is not None:
                timer.cancel()

    def _timeout_settlement(
        self, request: AskRequest, timeout: float | None, on_timeout: OnTimeout, default: Any
    ) -> str:
        """The settlement a timeout writes, decided (and validated) at ask time."""
        if timeout is None:
            return ""
        if not timeout > 0:
            raise AskError(
                ErrorCode.INVALID_REQUEST, f"timeout: must be > 0 seconds, not {timeout}"
            )
        if on_timeout == "fail":
            body = Settlement(
                state="CANCELLED", code=ErrorCode.TIMED_OUT, message=TIMED_OUT_MESSAGE, by="timeout"
            )
        elif on_timeout == "default":
            answers = parse_answers(request.questions, default_answers(request, default))
            body = Settlement(
                state="ANSWERED", answers=answers.answers, by="timeout", defaulted=True
            )
        else:
            raise AskError(
                ErrorCode.INVALID_REQUEST,
                f"on_timeout must be 'fail' or 'default', not {on_timeout!r}",
            )
        return body.model_dump_json(exclude_none=True)

    async def _time_out(self, request_id: str, future: asyncio.Future[Settlement]) -> None:
        """The ask's own timeout: fire it (Redis unreachable: again, until it fires or
        the ask ends), so timeouts hold without a sweeper, through an outage too."""
        pause = 0.05
        while not future.done():
            try:
                if (await self.fire(f"timeout|{request_id}"))[0] != "FIRED":
                    # Fired by someone else (its settlement is on its way), or the
                    # request is gone: either way this ask must end.
                    await self._waiter.recheck(self.redis, [request_id])
                return
            except (AskError, *CONNECTION_ERRORS) as exc:
                if isinstance(exc, AskError) and exc.code is not ErrorCode.REDIS_UNAVAILABLE:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _keep_alive(self) -> None:
        """Heartbeat this caller process while it waits on asks, so the sweeper can tell
        a caller that is gone (its asks are cancelled) from one that is waiting."""
        if self._beating is not None and not self._beating.done():
            return
        key, ttl = self.keys.alive(self.process_id), self.settings.caller_ttl

        async def beat() -> None:
            await self.redis.set(key, "1", px=duration_ms(ttl, "caller_ttl"))

        async def run() -> None:
            while self._waiter.pending:
                await keep_beating("caller", beat, ttl / 3, stop=self._waiter.idle)
                # Nothing left to wait on: leave no trace (the script keeps the keys if
                # an ask got in meanwhile, and so does this loop).
                with contextlib.suppress(*CONNECTION_ERRORS):
                    await self.forget_caller()

        self._beating = asyncio.ensure_future(run())

    async def fire(self, timer: str) -> list[str]:
        """Fire a due timer (see lua/fire.lua); a timer fired already or made moot is
        a no-op. Returns the script's reply."""
        request_id = timer.split("|")[1]
        try:
            return await self._run("fire", request_id, [timer])
        except AskError as exc:
            if exc.code != ErrorCode.NOT_FOUND:
                raise
            # The request is gone (expired): its timer has nothing left to do.
            with self.redis_errors():
                await self.redis.zrem(self.keys.timers, timer)
            return ["MOOT"]

    def build_request(
        self,
        questions: AskInput | Mapping[str, Any] | Sequence[Question | Mapping[str, Any]] | str,
        caller: Caller,
        scope: Mapping[str, str] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> AskRequest:
        if isinstance(questions, AskInput):
            parsed = questions
        elif isinstance(questions, Sequence) and not isinstance(questions, (str, bytes)):
            items = [
                q.model_dump(by_alias=True) if isinstance(q, Question) else q for q in questions
            ]
            parsed = parse_input({"questions": items})
        else:
            parsed = parse_input(questions)
        scope_dict = parse_scope(scope)
        digest = None
        if idempotency_key is not None:
            digest = idempotency_digest(check_text(idempotency_key, "idempotency_key", 256))
        # A new id for every request, idempotent or not: nothing keyed by a request id
        # (a replica's cache, a channel's record of its message) can then outlive the
        # request and be taken for another one asked later with the same key.
        return AskRequest(
            id=uuid.uuid4().hex,
            questions=parsed.questions,
            scope=scope_dict,
            caller=caller,
            created_ms=int(time.time() * 1000),
            idempotency=digest,
        )

    async def _wait(
        self, request_id: str, future: asyncio.Future[Settlement], signal: AbortSignal | None
    ) -> Settlement:
        try:
            if signal is not None:
                fired = asyncio.ensure_future(signal.wait())
                try:
                    await asyncio.wait({future, fired}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    fired.cancel()
                if not future.done():
                    # The turn's signal fired: cancel, then take whichever settlement won
                    # (an answer that landed first is still the answer). Redis out of
                    # reach: the withdrawal lands once it is back; the turn is over now.
                    if not await self._withdraw(request_id):
                        raise AskError(ErrorCode.ABORTED, ABORTED_MESSAGE)
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                await self._withdraw(request_id)
            raise
        finally:
            if not future.done():
                self._waiter.forget(request_id, future)  # this ask stops waiting for it

    async def _withdraw(self, request_id: str) -> bool:
        """The caller gives up on its ask (signal, cancelled task, or a publication it
        could not confirm). Shielded, so it completes even while the caller's task is
        being cancelled. True once Redis has it (or nothing was left to withdraw);
        False when Redis is out of reach: it is then retried in the background until it
        lands, so a question nobody waits for does not stay answerable."""
        return await asyncio.shield(self._withdraw_once(request_id, retry_later=True))

    async def _withdraw_once(self, request_id: str, *, retry_later: bool) -> bool:
        try:
            await self.cancel(request_id, ErrorCode.ABORTED, ABORTED_MESSAGE, by="caller")
        except AskError as exc:
            if exc.code is ErrorCode.REDIS_UNAVAILABLE:
                if retry_later:
                    self._spawn(self._withdraw_later(request_id))
                return False
            if exc.code is not ErrorCode.NOT_FOUND:  # NOT_FOUND: it was never published
                log.warning("could not withdraw %s: %s", request_id, exc)
        return True

    async def _withdraw_later(self, request_id: str) -> None:
        pause = 0.1
        while not await self._withdraw_once(request_id, retry_later=False):
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    async def cancel(self, request_id: str, code: ErrorCode, message: str, *, by: str) -> bool:
        """Settle a pending request as CANCELLED; False if it had already settled."""
        body = Settlement(state="CANCELLED", code=code, message=message, by=by)
        result = await self._run(
            "cancel", request_id, [code.value, body.model_dump_json(exclude_none=True), by]
        )
        return result[0] == "CANCELLED"

    async def abort_turn(self, turn_id: str, *, by: str = "abort") -> int:
        """Mark the turn aborted (durably, first), then cancel its pending requests.

        Returns how many requests this call cancelled. Works whether or not their
        callers are alive; an ask for the turn that comes later fails at once.
        """
        k = self.keys
        check_text(turn_id, "turn", 200)
        body = Settlement(
            state="CANCELLED", code=ErrorCode.ABORTED, message=ABORTED_MESSAGE, by=by
        ).model_dump_json(exclude_none=True)
        for attempt in range(8):
            with self.redis_errors():
                ids = sorted(await self.redis.smembers(k.turn(turn_id)))  # type: ignore[misc]
                rows = []
                if ids:
                    async with self.redis.pipeline(transaction=False) as pipe:
                        for request_id in ids:
                            pipe.hmget(k.request(request_id), ["inbox", "idem"])
                        rows = await pipe.execute()
                tiers = await self.tier_streams(refresh=attempt > 0)
                keys = [k.aborted(turn_id), k.turn(turn_id), k.pending, k.events, k.timers, *tiers]
                for request_id, (inbox, idem) in zip(ids, rows, strict=True):
                    inbox = inbox or k.inbox("")
                    keys += [
                        k.request(request_id),
                        k.reply(request_id),
                        inbox,
                        k.asked(k.process_of(inbox)),
                        k.payload(request_id),
                        k.timeout_body(request_id),
                        idem or k.idem(None),
                    ]
                args = [
                    k.tier_prefix,
                    self.settings.settled_ttl,
                    self.settings.events_maxlen,
                    self.settings.abort_ttl,
                    body,
                    by,
                    len(tiers),
                    *ids,
                ]
                result = await self.call("abort_turn", keys, args)
            if result[0] == "ABORTED":
                return int(result[1])
        raise AskError(ErrorCode.INTERNAL, f"turn {quoted(turn_id)} kept changing while aborting")

    @contextlib.asynccontextmanager
    async def agent(self, agent_id: str, owner: str | None = None) -> AsyncIterator[None]:
        """Keep an agent registered as live (with its owner) while the block runs.

        A child whose owner is live gets DELEGATED_CALLER; once the owner's heartbeat
        lapses (its process is gone), a restored child runs as a root and may ask.
        """
        check_text(agent_id, "agent", 200)
        if owner is not None:
            check_text(owner, "owner", 200)
        key = self.keys.agent(agent_id)
        ttl_ms = duration_ms(self.settings.agent_ttl, "agent_ttl")

        async def beat() -> None:
            await self.redis.set(key, owner or "", px=ttl_ms)

        with self.redis_errors():
            await beat()
        self._agents[agent_id] = owner
        period = self.settings.agent_ttl / 3
        task = asyncio.create_task(_beat_later(f"agent {agent_id}", beat, period))
        try:
            yield
        finally:
            task.cancel()
            self._agents.pop(agent_id, None)
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.redis.delete(key)

    # --- the answerer side ---------------------------------------------------------

    def remember(self, info: RequestInfo) -> None:
        """Cache a request's immutable facts (the runtime learns them from offers)."""
        self._infos[info.request.id] = info
        self._infos.move_to_end(info.request.id)
        while len(self._infos) > INFO_CACHE:
            self._infos.popitem(last=False)

    async def holds(self, request_id: str, group: str) -> bool:
        """Whether the request is pending with `group` among its claimers (one read)."""
        check_request_id(request_id)
        with self.redis_errors():
            state, claimers = await self.redis.hmget(  # type: ignore[misc]
                self.keys.request(request_id), ["state", "claimers"]
            )
        return state is not None and state not in TERMINAL and group in split_groups(claimers)

    async def request_info(self, request_id: str) -> RequestInfo:
        """The request's immutable facts: cached (request ids are never reused, so a
        cached entry never describes another request), else read."""
        info = self._infos.get(request_id)
        if info is not None:
            return info
        check_request_id(request_id)
        with self.redis_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(self.keys.payload(request_id))
                pipe.hmget(self.keys.request(request_id), ["inbox", "payload"])
                payload, (inbox, old_payload) = await pipe.execute()
            payload = payload or old_payload  # asked before the payload had its own key
        if payload is None:
            raise AskError(ErrorCode.NOT_FOUND, f"no request {request_id!r} (unknown or expired)")
        info = RequestInfo(request=AskRequest.model_validate_json(payload), inbox=inbox)
        self.remember(info)
        return info

    async def accept(self, offer: Offer) -> bool:
        """Claim the offer for the group. False when it is no longer the group's to take."""
        result = await self._run(
            "accept", offer.request_id, [offer.group, offer.tier, offer.offer_id]
        )
        return result[0] == "CLAIMED"

    async def decline(self, offer: Offer) -> None:
        """The group will not take it; the last decline of a tier moves it on."""
        await self.decline_entry(offer.request_id, offer.group, offer.tier, offer.offer_id)

    async def decline_entry(
        self, request_id: str, group: str, tier: int, offer_id: str
    ) -> list[str]:
        """Decline offer entry `offer_id`; the script's reply (CLAIMED: the group holds
        a claim on it, which a decline does not give back)."""
        return await self._run("decline", request_id, [group, tier, offer_id])

    async def release(self, request_id: str, group: str) -> bool:
        """Give back the group's claim; the last release of a tier moves it on."""
        result = await self._run("release", request_id, [group])
        return result[0] == "RELEASED"

    async def answer(self, request_id: str, group: str, answers: Any, *, by: str) -> Answers:
        """Submit a human's answer on behalf of a group holding the claim.

        Any replica of the group may call this (the claim belongs to the group). Raises
        INVALID_REQUEST naming the problem, ALREADY_SETTLED ("answered by ...") for a
        late or duplicate answer, NOT_CLAIMED when the group holds no claim.
        """
        valid, result = await self._settle_answer("answer", request_id, [group], answers, by)
        if result[0] == "ANSWERED":
            return valid
        raise self._refused(request_id, result)

    async def claim_and_answer(self, offer: Offer, answers: Any, *, by: str) -> Answers:
        """Claim an offer and answer it in one atomic step (a group that answers without
        asking anyone). Raises like `answer`; STALE_OFFER/NOT_OFFERED as NOT_CLAIMED."""
        valid, result = await self._settle_answer(
            "claim_answer",
            offer.request_id,
            [offer.group, offer.tier, offer.offer_id],
            answers,
            by,
        )
        if result[0] == "ANSWERED":
            return valid
        if result[0] in ("STALE_OFFER", "NOT_OFFERED"):
            result = ["NOT_CLAIMED", "no longer offered to this group"]
        raise self._refused(offer.request_id, result)

    async def _settle_answer(
        self, name: str, request_id: str, lead: list[str | int], answers: Any, by: str
    ) -> tuple[Answers, list[str]]:
        """Validate the answers against the request's questions (INVALID_REQUEST naming
        what is wrong), then run the answering script `name` with them."""
        info = await self.request_info(request_id)
        valid = parse_answers(info.request.questions, answers)
        body = Settlement(state="ANSWERED", answers=valid.answers, by=by)
        result = await self._run(
            name, request_id, [*lead, body.model_dump_json(exclude_none=True), by]
        )
        return valid, result

    @staticmethod
    def _refused(request_id: str, result: list[str]) -> AskError:
        if result[0] == "SETTLED":
            state, by, code = result[1], result[2], result[3]
            if state == "ANSWERED":
                detail = f"answered by {by}" if by else "answered"
            elif state == "CANCELLED":
                detail = "cancelled (the turn was aborted)" if code == "ABORTED" else "cancelled"
            else:
                detail = f"failed ({code})" if code else "failed"
            return AskError(ErrorCode.ALREADY_SETTLED, f"already settled: {detail}")
        if result[0] == "NOT_FOUND":
            return AskError(ErrorCode.NOT_FOUND, f"no request {request_id!r} (unknown or expired)")
        return AskError(
            ErrorCode.NOT_CLAIMED,
            f"this group holds no claim on request {request_id!r} (it is {result[1].lower()})",
        )

    # --- reads ---------------------------------------------------------------------

    async def settlement(self, request_id: str) -> Settlement | None:
        """The request's settlement, while its reply key lasts (None for an id that
        cannot be a request's)."""
        if not REQUEST_ID_PATTERN.fullmatch(request_id):
            return None
        with self.redis_errors():
            body = await self.redis.get(self.keys.reply(request_id))
        return None if body is None else Settlement.model_validate_json(body)

    async def idempotent_request(self, key: str) -> str | None:
        """The id of the request asked with idempotency key `key` (a tool-call id),
        while the request is kept."""
        digest = idempotency_digest(check_text(key, "idempotency_key", 256))
        with self.redis_errors():
            request_id: str | None = await self.redis.get(self.keys.idem(digest))
        return request_id

    async def now_ms(self) -> int:
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def request_status(self, request_id: str) -> RequestStatus | None:
        if not REQUEST_ID_PATTERN.fullmatch(request_id):
            return None  # no request has such an id
        with self.redis_errors():
            rows = await self._request_rows([request_id], await self.now_ms())
        return rows[0] if rows else None

    async def _request_rows(self, ids: Sequence[str], now: int) -> list[RequestStatus]:
        fields = ["state", "tier", "undecided", "claimers", "created_ms", "by", "code", "payload"]
        async with self.redis.pipeline(transaction=False) as pipe:
            for request_id in ids:
                pipe.hmget(self.keys.request(request_id), fields)
                pipe.get(self.keys.payload(request_id))
            replies = await pipe.execute()
        out = []
        for request_id, row, payload in zip(ids, replies[::2], replies[1::2], strict=True):
            state, tier, undecided, claimers, created, by, code, old_payload = row
            payload = payload or old_payload  # asked before the payload had its own key
            if state is None or payload is None:
                continue
            request = AskRequest.model_validate_json(payload)
            out.append(
                RequestStatus(
                    id=request_id,
                    state=state,
                    tier=int(tier) if tier is not None else None,
                    undecided=split_groups(undecided),
                    claimers=split_groups(claimers),
                    header=request.questions[0].header,
                    agent=request.caller.agent_id,
                    turn=request.caller.turn_id,
                    age_seconds=max(0, now - int(created or now)) / 1000,
                    by=by or "",
                    code=code or "",
                )
            )
        return out

    async def status(self, limit: int = 100) -> Status:
        """Groups (priority, live replicas, entries pending) and the oldest requests pending."""
        k = self.keys
        with self.redis_errors():
            now = await self.now_ms()
            priorities = await self.redis.hgetall(k.groups)  # type: ignore[misc]
            infos = await self.redis.hgetall(k.group_info)  # type: ignore[misc]
            groups = []
            for name, priority in sorted(priorities.items(), key=lambda kv: (int(kv[1]), kv[0])):
                info = json.loads(infos.get(name, "{}"))
                live = await self.redis.zcount(k.consumers(name), now + 1, "+inf")
                try:
                    pending = (await self.redis.xpending(k.tier(int(priority)), name))["pending"]
                except ResponseError:
                    pending = 0
                groups.append(
                    GroupStatus(
                        name=name,
                        priority=int(priority),
                        kind=info.get("kind", ""),
                        scope=info.get("scope", {}),
                        live_consumers=live,
                        pending=pending,
                    )
                )
            ids = await self.redis.zrange(k.pending, 0, limit - 1) if limit > 0 else []
            requests = await self._request_rows(ids, now)
        return Status(groups=groups, requests=requests)
