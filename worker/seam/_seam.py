"""The user-questions seam: the service under the tool, as one object.

`Seam` is the public façade both sides use; each of its methods belongs to one role,
and the roles are separate classes (as bullmq's Queue, Worker and QueueGetters sit over
its Scripts):

    Seam ─┬─ asking     the caller side: ask, wait, withdraw, abort a turn, agents (_asking)
          ├─ answering  the group side: accept, decline, release, answer (_answering)
          ├─ registry   the groups: register, leave, take over, trim, remove (_registry)
          ├─ requests   the one reader of a request's state (_requests; the seam's
          │             reads, _seam_reads)
          └─ scripts    the one runner of the Lua scripts, below all of them (_scripts)

A seam opens one bounded pool of command connections (so 10,000 pending asks share a
handful), plus one dedicated connection per blocking loop.

With `ASKQ_SHARDS` > 1 (`_shards.py`) each shard is one set of those roles over its
own keyspace (`_sharded.Shard`), all on the one pool: an ask goes to the shard of its
turn, anything about a request to the shard its id names, and `requests`,
`answering` and `registry` stand for every shard (`_sharded.py`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from typing import Any

from redis.asyncio import Redis

from ..protocol._build import build_request, idempotency_digest
from ..protocol._checks import (
    MAX_CALLER_ID,
    MAX_IDEMPOTENCY_KEY,
    MAX_MESSAGE,
    check_by,
    check_group,
    check_optional,
    check_request_id,
    check_text,
)
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import (
    Answers,
    AskInput,
    AskRequest,
    Caller,
    Offer,
    Question,
)
from ..protocol._replies import Reply
from ..protocol._settings import Settings
from ..protocol._types import AbortSignal, OnTimeout
from ..redis._cluster import is_cluster_url
from ..redis._connections import (
    blocking_client,
    command_client,
    pinned_client,
    redis_errors,
)
from ..redis._marker import check_layout
from ..redis._requests import Requests
from ..redis._shards import Layout
from ._answering import Answering
from ._registry import Registry
from ._seam_reads import SeamReads
from ._sharded import Shard, ShardedAnswering, ShardedRegistry, ShardedRequests


class Seam(SeamReads):
    """The async seam client. Use it as an async context manager::

        async with Seam.from_url("redis://localhost:6379/0") as seam:
            answers = await seam.ask(questions, Caller(agent_id="a1", turn_id="t1"))

    A seam built from an existing client opens its own bounded pool with that client's
    connection settings.
    """

    def __init__(
        self, redis: Redis | None = None, *, settings: Settings | None = None, **overrides: Any
    ) -> None:
        self.settings = settings or Settings(**overrides)
        if settings is not None and overrides:
            self.settings = settings.model_copy(update=overrides)
        self.layout = Layout(self.settings.prefix, self.settings.shards)
        # The deployment's own keys ({prefix}): with one shard, also the shard's.
        self.keys = self.layout.deployment
        self._source = redis
        self.process_id = uuid.uuid4().hex
        self.client_name = f"askq-{self.process_id[:12]}"
        self.redis = command_client(redis, self.settings, self.client_name)
        self._single_node: Redis | None = None
        # One Shard per hash tag, all on the one bounded command client (_sharded.py).
        self.shards = [
            Shard(
                i,
                self.layout,
                self.redis,
                self.settings,
                self.process_id,
                functools.partial(self.blocking_connection, i),
            )
            for i in range(self.layout.shards)
        ]
        first = self.shards[0]
        for shard in self.shards[1:]:
            # One bounded cache of requests' facts for the process, whatever N: ids
            # are unique over the shards.
            shard.requests._infos = first.requests._infos
        # Shard 0's caller side and scripts (with several shards, the seam's methods
        # route by turn or request id: use those, or `shard_of_*`).
        self.scripts = first.scripts
        self.asking = first.asking
        self.requests: Requests
        self.answering: Answering
        self.registry: Registry
        if len(self.shards) == 1:
            self.requests, self.answering, self.registry = (
                first.requests,
                first.answering,
                first.registry,
            )
        else:
            self.requests = ShardedRequests(self.shards, self.layout, self.redis, self.settings)
            self.answering = ShardedAnswering(self.shards, self.layout, self.requests)
            self.registry = ShardedRegistry(self.shards, self.settings)

    def shard_of_turn(self, turn_id: str) -> Shard:
        return self.shards[self.layout.of_turn(turn_id)]

    def shard_of_request(self, request_id: str) -> Shard:
        return self.shards[self.layout.of_request(request_id)]

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> Seam:
        return cls(settings=Settings(redis_url=url, **overrides))

    def blocking_connection(self, shard: int = 0) -> Redis:
        """A new single-connection client for one blocking loop of shard `shard` (on a
        cluster, to the master that owns its slot)."""
        tag = self.layout.keys(shard).tag
        return blocking_client(self._source, self.settings, self.client_name, tag)

    @property
    def single_node(self) -> Redis:
        """A client for what needs WATCH and MULTI on the deployment's keys (a channel's
        store): the command client on a single Redis; on a cluster, a bounded client of
        the master that owns the prefix's slot (made once)."""
        if not is_cluster_url(self.settings.redis_url):
            return self.redis
        if self._single_node is None:
            self._single_node = pinned_client(self._source, self.settings, self.client_name)
        return self._single_node

    async def __aenter__(self) -> Seam:
        try:
            await self.ping()
            await self.check_shards()
        except BaseException:
            await self.aclose()  # `async with` will not call __aexit__
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def ping(self) -> None:
        with redis_errors(self.settings):
            await self.redis.ping()

    async def check_shards(self) -> None:
        """Record this deployment's number of shards, or refuse (CONFIG_ERROR) one that
        differs from the number recorded while requests are pending (_marker.py)."""
        await check_layout(self.redis, self.layout, self.settings)

    async def aclose(self) -> None:
        for shard in self.shards:
            await shard.asking.aclose()
            with suppress(Exception):
                await shard.scripts.pipeline.aclose()
        await self.redis.aclose(close_connection_pool=True)
        if self._single_node is not None:
            await self._single_node.aclose(close_connection_pool=True)

    # --- the agent side (asking) --------------------------------------------------------

    def ask(
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
    ) -> Coroutine[Any, Any, Answers]:
        """Publish the questions and block until they are answered, or raise AskError.

        `timeout` (seconds; default none): then `on_timeout="fail"` raises TIMED_OUT, and
        `"default"` settles with `default` (answers in the tool's output shape), or with
        each question's recommended option, marked `defaulted` in the result.
        `idempotency_key` (e.g. the tool-call id): asking again with the same key while
        the request is pending waits on that same request; after it settled, returns
        its settlement (while it is kept) instead of asking the human again.
        `on_published(request_id)` is called once the question is out and the wait
        begins, or when it turns out to be settled already (the CLI prints the request
        id there).

        REDIS_UNAVAILABLE means the question was not published. When Redis stops
        answering after the ask was sent (its reply lost), whether it was published is
        unknown: the ask is sent again, idempotently, until Redis answers, so it never
        fails while a human can still see the question.
        """
        options: dict[str, Any] = {
            "scope": scope,
            "signal": signal,
            "timeout": timeout,
            "on_timeout": on_timeout,
            "default": default,
            "idempotency_key": idempotency_key,
            "on_published": on_published,
        }
        if idempotency_key is not None and len(self.shards) > 1:
            return self._ask_idempotent(questions, caller, idempotency_key, options)
        # The caller side's coroutine itself, not one wrapping it: 10,000 asks pending
        # hold 10,000 coroutine frames, and a frame per ask more is megabytes.
        return self.shard_of_turn(caller.turn_id).asking.ask(questions, caller, **options)

    async def _ask_idempotent(
        self, questions: Any, caller: Caller, key: str, options: dict[str, Any]
    ) -> Answers:
        """With several shards, an ask with an idempotency key goes where the request
        asked with that key lives, if any (an MCP client re-issuing a call may come
        back under another turn, so in another shard), else to its turn's shard. An
        aborted turn still fails at once: its mark is in the turn's own shard."""
        home = self.shard_of_turn(caller.turn_id)
        target = home
        digest = idempotency_digest(check_text(key, "idempotency_key", MAX_IDEMPOTENCY_KEY))
        found = await self.requests.idempotent(digest)
        if found is not None and self.layout.of_request(found) != home.index:
            with redis_errors(self.settings):
                aborted = await self.redis.exists(home.keys.aborted(caller.turn_id))
            if not aborted:
                target = self.shard_of_request(found)
        return await target.asking.ask(questions, caller, **options)

    def build_request(
        self,
        questions: AskInput | Mapping[str, Any] | Sequence[Question | Mapping[str, Any]] | str,
        caller: Caller,
        scope: Mapping[str, str] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> AskRequest:
        return build_request(
            questions,
            caller,
            scope,
            idempotency_key=idempotency_key,
            request_id=self.shard_of_turn(caller.turn_id).asking.new_id(),
        )

    async def abort_turn(self, turn_id: str, *, by: str = "abort") -> int:
        """Mark the turn aborted (durably, first), then cancel its pending requests.

        Returns how many requests this call cancelled. Works whether or not their
        callers are alive; an ask for the turn that comes later fails at once.
        """
        check_text(turn_id, "turn_id", MAX_CALLER_ID)
        check_by(by)
        return await self.shard_of_turn(turn_id).asking.abort_turn(turn_id, by=by)

    def agent(self, agent_id: str, owner: str | None = None) -> AbstractAsyncContextManager[None]:
        """Keep an agent registered as live (with its owner) while the block runs.

        A child whose owner is live gets DELEGATED_CALLER; once the owner's heartbeat
        lapses (its process is gone), a restored child runs as a root and may ask.
        """
        check_text(agent_id, "agent_id", MAX_CALLER_ID)
        check_optional(owner, "owner", MAX_CALLER_ID)
        if len(self.shards) == 1:
            return self.asking.agent(agent_id, owner)
        return _in_every_shard([shard.asking.agent(agent_id, owner) for shard in self.shards])

    async def cancel(self, request_id: str, code: ErrorCode, message: str, *, by: str) -> bool:
        """Settle a pending request as CANCELLED; False if it had already settled."""
        check_request_id(request_id)
        check_by(by)
        check_text(message, "message", MAX_MESSAGE)
        return await self.shard_of_request(request_id).asking.cancel(
            request_id, code, message, by=by
        )

    async def forget_caller(self, process_id: str | None = None) -> None:
        check_optional(process_id, "process_id", MAX_CALLER_ID)
        for shard in self.shards:
            await shard.asking.forget_caller(process_id)

    async def fire(self, timer: str) -> Reply:
        """Fire a due timer (see lua/fire.lua); one fired already or made moot is a
        no-op. Returns the kind of the script's reply (FIRED, MOOT, GONE)."""
        if not isinstance(timer, str) or "|" not in timer:
            raise AskError(ErrorCode.INVALID_REQUEST, "timer: not a timer (kind|request|...)")
        request_id = check_request_id(timer.split("|")[1])
        return (await self.shard_of_request(request_id).scripts.fire(timer)).kind

    # --- the answerer side (answering) --------------------------------------------------

    async def accept(self, offer: Offer) -> bool:
        """Claim the offer for the group. False when it is no longer the group's to take."""
        return await self.answering.accept(offer)

    async def decline(self, offer: Offer) -> None:
        """The group will not take it; the last decline of a tier moves it on."""
        await self.answering.decline(offer.request_id, offer.group, offer.tier, offer.offer_id)

    async def release(self, request_id: str, group: str) -> bool:
        """Give back the group's claim; the last release of a tier moves it on."""
        check_request_id(request_id)
        return await self.answering.release(request_id, check_group(group))

    async def answer(self, request_id: str, group: str, answers: Any, *, by: str) -> Answers:
        """Submit a human's answer on behalf of a group holding the claim.

        Any replica of the group may call this (the claim belongs to the group). Raises
        INVALID_REQUEST naming the problem, ALREADY_SETTLED ("answered by ...") for a
        late or duplicate answer, NOT_CLAIMED when the group holds no claim.
        """
        check_request_id(request_id)
        check_group(group)
        check_by(by)
        return await self.answering.answer(request_id, group, answers, by=by)

    async def claim_and_answer(self, offer: Offer, answers: Any, *, by: str) -> Answers:
        check_by(by)
        return await self.answering.claim_and_answer(offer, answers, by=by)


@asynccontextmanager
async def _in_every_shard(
    contexts: Sequence[AbstractAsyncContextManager[None]],
) -> AsyncIterator[None]:
    async with AsyncExitStack() as stack:
        for context in contexts:
            await stack.enter_async_context(context)
        yield
