"""Redis Cluster: `ASKQ_REDIS_URL=redis+cluster://host:port[,host:port...]` (TLS:
`rediss+cluster://`; `user:password@` before the first node), the seed nodes the
cluster's layout is read from.

Two kinds of client, for two kinds of work:

- Commands and scripts go through redis-py's asyncio cluster client (`ClusterClient`),
  which sends each to the master that owns its key's slot and follows MOVED and ASK.
  It re-sends only what certainly did not run: a connection that could not be made, a
  cluster that is down or between masters (a failover), a redirection. Those are tried
  again, with backoff, for `ASKQ_CLUSTER_RETRY_SECONDS` (a failover takes a few seconds),
  then end as `NotConnected`. A connection lost after a command was sent is reported at
  once, as on a single Redis: the command may have run, and the caller decides (an ask
  is sent again marked as a repeat; see `_pending.py`). Concurrency is bounded by
  `ASKQ_MAX_CONNECTIONS`, as the single-Redis pool is: a command waits for a permit
  rather than opening another connection.
- What needs one connection to one master — a blocking loop (BLMPOP, XREADGROUP BLOCK),
  a WATCH/MULTI (arq's queue, a channel's `once` guard) — gets a plain client whose
  connection is pinned to the master that owns a hash tag's slot (`pinned_pool`). Each
  time it connects it asks the cluster which master that is, so after a failover or a
  slot moved it reconnects to the new owner; a connection that cannot be made (the
  master dead, no master yet) is tried again for `ASKQ_CLUSTER_RETRY_SECONDS`, as a
  command is. A MOVED reply (it reached a node that no longer owns the slot) drops the
  connection as if it were lost (the command did not run), so the loops' own
  reconnect handles it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, NodesManager, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.crc import key_slot
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    MaxConnectionsError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from ._wire import NotConnected

SCHEMES = {"redis+cluster": False, "rediss+cluster": True}  # scheme -> TLS

# Replies that mean the command was not run by the node that got it.
_REDIRECTS = ("MOVED ", "ASK ", "CLUSTERDOWN", "TRYAGAIN")


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in SCHEMES


@dataclass(frozen=True)
class ClusterUrl:
    """What a `redis+cluster://` URL says: the seed nodes and how to log in."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    tls: bool = False

    @classmethod
    def parse(cls, url: str) -> ClusterUrl:
        """ValueError naming what is wrong (the caller makes it a CONFIG_ERROR)."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in SCHEMES:
            raise ValueError("a cluster URL starts with redis+cluster:// or rediss+cluster://")
        if "?" in rest or "#" in rest:
            raise ValueError("a cluster URL takes no query options")
        netloc, _, path = rest.partition("/")
        if path not in ("", "0"):
            raise ValueError(f"a cluster has only database 0, not {path!r}")
        username = password = None
        if "@" in netloc:
            userinfo, _, netloc = netloc.rpartition("@")
            user, colon, secret = userinfo.partition(":")
            username, password = (
                (unquote(user) or None, unquote(secret))
                if colon
                else (
                    None,
                    unquote(user),
                )
            )
        nodes = []
        for node in netloc.split(","):
            host, colon, port = node.strip().rpartition(":")
            if not colon or not host:
                raise ValueError(f"node {node!r}: expected host:port")
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"node {node!r}: port {port!r} is not a port number")
            nodes.append((host.strip("[]"), int(port)))
        return cls(tuple(nodes), username, password, SCHEMES[scheme.lower()])

    def connection_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"username": self.username, "password": self.password}
        if self.tls:
            kwargs["ssl"] = True
        return kwargs


def tag_slot(tag: str) -> int:
    """The slot of every key whose hash tag is `tag` (`{tag}:...`)."""
    return key_slot(("{" + tag + "}").encode())


# --- the command client ---------------------------------------------------------------

# Errors after which the command certainly did not run: safe to send again.
_NOT_RUN: tuple[type[BaseException], ...] = (
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
    ClusterError,  # "TTL exhausted": redirected too many times
    MaxConnectionsError,
)


def _unreachable(exc: BaseException | None) -> bool:
    """redis-py's word for "no node of the cluster answered" when it reads the layout."""
    return isinstance(exc, RedisClusterException) and "cannot be connected" in str(exc)


_holding: contextvars.ContextVar[bool] = contextvars.ContextVar("askq_permit", default=False)

# Set while redis-py handles a failed command inside `_execute_command`: its "close the
# client" there means "read the layout again", not "drop every connection" (below).
_resetting: contextvars.ContextVar[bool] = contextvars.ContextVar("askq_reset", default=False)


class _KeepingNodes(NodesManager):
    """redis-py's view of the cluster, keeping the node objects (and their connections)
    of the nodes a new reading of the layout still lists. redis-py makes every node
    anew each time it reads the layout and disconnects the old ones, in-use connections
    too: at a failover every command then in flight on a master that stayed up lost its
    connection after it was sent (so it may have run, and its caller had to treat it so)."""

    __slots__ = ()

    def set_nodes(
        self, old: dict[str, ClusterNode], new: dict[str, ClusterNode], remove_old: bool = False
    ) -> None:
        if old is self.nodes_cache:
            kept: dict[int, ClusterNode] = {}  # id(new node) -> the old one it stands for
            for name, node in new.items():
                mine = old.get(name)
                if mine is not None and mine is not node:
                    mine.server_type = node.server_type  # a replica promoted, say
                    kept[id(node)] = mine
                    new[name] = mine
            if kept:
                for nodes in {id(nodes): nodes for nodes in self.slots_cache.values()}.values():
                    nodes[:] = [kept.get(id(node), node) for node in nodes]
        super().set_nodes(old, new, remove_old)


class ClusterClient(RedisCluster):
    """redis-py's cluster client with askq's rules: bounded, and re-sending only what
    did not run (see the module's docstring)."""

    # redis-py retries these once by itself (cluster_error_retry_attempts=1, which its
    # pipeline needs): never a connection lost after sending.
    ERRORS_ALLOW_RETRY = (ClusterDownError, SlotNotCoveredError)  # type: ignore[assignment]

    def __init__(
        self, *, not_connected: type[Exception], retry_seconds: float, permits: int, **kwargs: Any
    ) -> None:
        super().__init__(cluster_error_retry_attempts=1, **kwargs)
        self.nodes_manager.__class__ = _KeepingNodes  # same state, one method more
        self._not_connected = not_connected
        self.retry_seconds = retry_seconds
        self._permits = asyncio.Semaphore(permits)
        self._reached = False  # has any command gone through yet

    @contextlib.asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        """At most `permits` commands or pipelines at once (one connection each per
        node). A redirected command inside a pipeline runs under the pipeline's."""
        if _holding.get():
            yield
            return
        async with self._permits:
            token = _holding.set(True)
            try:
                yield
            finally:
                _holding.reset(token)

    def not_run(self, exc: BaseException | None) -> bool:
        return isinstance(exc, (*_NOT_RUN, self._not_connected)) or _unreachable(exc)

    async def retrying(self, attempt: Any) -> Any:
        """Run `attempt()` again while it fails without having run, for retry_seconds.
        A cluster none of whose nodes answers at the first contact is not waited for
        (REDIS_UNAVAILABLE at once, as a single Redis that is not there)."""
        deadline = time.monotonic() + self.retry_seconds
        pause = 0.05
        while True:
            try:
                result = await attempt()
                self._reached = True
                return result
            except BaseException as exc:
                if not self.not_run(exc):
                    raise
                if _unreachable(exc) and not self._reached:
                    raise self._not_connected(str(exc)) from exc
                if time.monotonic() + pause > deadline:
                    if isinstance(exc, self._not_connected):
                        raise
                    raise self._not_connected(f"Redis Cluster: {exc}") from exc
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def initialize(self) -> ClusterClient:
        """Read the layout (redis-py's, but for COMMAND: the command table it reads from
        the default node, the first master listed, is read once, not at each reading of
        the layout. At a failover that master may be the dead one, and each failed
        reading would drop every connection again)."""
        if not self._initialize:
            return self
        if not self._lock:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._initialize:
                try:
                    await self.nodes_manager.initialize()
                    if self.commands_parser.commands:
                        self.commands_parser.node = self.nodes_manager.default_node
                    else:
                        await self.commands_parser.initialize(self.nodes_manager.default_node)
                    self._initialize = False
                except BaseException:
                    await self.nodes_manager.aclose()
                    await self.nodes_manager.aclose("startup_nodes")
                    raise
        return self

    def forget_layout(self) -> None:
        """The layout may be out of date (a command met a dead node, a cluster down or
        moving): the next command reads it again. No connection is dropped for it."""
        self._initialize = True

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        token = _resetting.set(True)
        try:
            return await super()._execute_command(target_node, *args, **kwargs)
        except MaxConnectionsError:  # (a ConnectionError in redis-py: no node is at fault)
            raise
        except RedisConnectionError:
            await self.drop_node_of(args, target_node)
            raise
        finally:
            _resetting.reset(token)

    async def drop_node_of(self, command: Any, node: ClusterNode | None = None) -> None:
        """A connection to the node `command` went to was lost or refused: its other
        connections are likely as dead (a killed master), so drop them rather than
        lose a command on each; the other nodes' stay (redis-py drops them all)."""
        with contextlib.suppress(Exception):
            for each in [node] if node is not None else await self._determine_nodes(*command):
                await each.disconnect()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.permit():
            run = super().execute_command
            return await self.retrying(lambda: run(*args, **kwargs))

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        # (the single-Redis client's signature: callers pass close_connection_pool)
        if _resetting.get():  # redis-py, after a failed command: read the layout again
            self.forget_layout()
            return
        await super().aclose()

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        if transaction or shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused, as redis-py does
        return _Pipeline(self)  # type: ignore[abstract]


class _Pipeline(ClusterPipeline):
    """A non-transactional pipeline under one permit, sent slot by slot (a slot is on
    one master at a time, so what one master could not take does not fail what another
    ran). Commands that certainly did not run (their master unreachable, the cluster
    down, a redirection) are sent again, as a lone command is, for the retry window;
    each command ends with its own result or error."""

    _client: ClusterClient

    async def initialize(self) -> ClusterPipeline:
        # redis-py reads the cluster's layout here (on `async with` too), outside any
        # retry: at a failover that failed the whole batch at once. `execute` reads it.
        self._command_stack = []
        return self

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        # redis-py blocks scripts in a cluster pipeline, because their keys might span
        # slots; askq's share one hash tag, and the cluster client routes them by it.
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        client, stack = self._client, self._command_stack
        self._command_stack = []
        if not stack:
            return []
        async with client.permit():
            groups = await self._by_slot(stack)
            await asyncio.gather(*(self._send(group, allow_redirections) for group in groups))
        if raise_on_error:
            for cmd in stack:
                if isinstance(cmd.result, BaseException):
                    raise cmd.result
        return [cmd.result for cmd in stack]

    async def _by_slot(self, stack: list[Any]) -> list[list[Any]]:
        """The commands by slot, in order; all in one group if a slot cannot be told
        (a keyless command: do not guess)."""
        client = self._client
        if client._initialize:
            with contextlib.suppress(Exception):  # the send reads it again, retried
                await client.retrying(client.initialize)
        groups: dict[int, list[Any]] = {}
        try:
            for cmd in stack:
                groups.setdefault(await client._determine_slot(*cmd.args), []).append(cmd)
        except Exception:  # noqa: BLE001
            return [stack]
        return list(groups.values())

    async def _send(self, cmds: list[Any], allow_redirections: bool) -> None:
        """Send `cmds` (one slot's) until each has a result or an error of its own."""
        client = self._client
        todo = cmds

        async def attempt() -> None:
            nonlocal todo
            for cmd in todo:
                cmd.result = None
            if client._initialize:
                await client.initialize()
            try:
                await ClusterPipeline._execute(
                    self, client, todo, raise_on_error=False, allow_redirections=allow_redirections
                )
            except AttributeError:
                # redis-py's bookkeeping after a failed command reads the default node,
                # which a failed reading of the layout may have cleared (None.name):
                # the results are in by then.
                pass
            except BaseException as exc:
                if client.not_run(exc):
                    client.forget_layout()
                raise
            lost = next((c for c in todo if isinstance(c.result, RedisConnectionError)), None)
            if lost is not None:
                await client.drop_node_of(lost.args)
            failed = next((i for i, cmd in enumerate(todo) if client.not_run(cmd.result)), None)
            if failed is None:
                return
            client.forget_layout()
            rest = todo[failed:]
            if all(client.not_run(cmd.result) for cmd in rest):
                todo = rest  # none of them ran: all of them go again, in order
                raise rest[0].result
            # A later command ran: sent again now, these would run after it.
            for cmd in rest:
                if client.not_run(cmd.result):
                    cmd.result = client._not_connected(f"Redis Cluster: {cmd.result}")

        try:
            await client.retrying(attempt)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - each command that has no result gets it
            for cmd in todo:
                if cmd.result is None or client.not_run(cmd.result):
                    cmd.result = exc


def cluster_client(
    url: ClusterUrl,
    *,
    connection_class: type[Connection],
    not_connected: type[Exception],
    retry_seconds: float,
    max_connections: int,
    **kwargs: Any,
) -> ClusterClient:
    client = ClusterClient(  # type: ignore[abstract]
        startup_nodes=[ClusterNode(host, port) for host, port in url.nodes],
        not_connected=not_connected,
        retry_seconds=retry_seconds,
        permits=max_connections,
        # The bound is the permits: redis-py's own per-node limit counts a connection
        # that failed while sending as in use for good (it is never handed back), and
        # after a few failovers' worth of those a node would refuse every command.
        max_connections=2**31,
        connection_error_retry_attempts=0,
        **url.connection_kwargs(),
        **kwargs,
    )
    # The nodes it discovers are made with these kwargs: hiredis packing, NotConnected.
    client.connection_kwargs["connection_class"] = connection_class
    return client


# --- pinned connections ---------------------------------------------------------------


def sync_master_client(url: ClusterUrl, tag: str, **kwargs: Any) -> Any:
    """A synchronous plain client of the master owning `{tag}`'s slot, found now (for
    the metrics scrape, which runs in a thread of its own; it asks again after a
    failure). ConnectionError when no seed answers."""
    import redis

    slot, errors = tag_slot(tag), []
    for host, port in url.nodes:
        seed = redis.Redis(host=host, port=port, **url.connection_kwargs(), **kwargs)
        try:
            layout = seed.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
        except (RedisError, OSError) as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        finally:
            seed.close()
        for start, end, master, *_ in layout:
            if int(start) <= slot <= int(end):
                return redis.Redis(
                    host=str(master[0]), port=int(master[1]), **url.connection_kwargs(), **kwargs
                )
    raise ConnectionError(f"Redis Cluster: {'; '.join(errors) or f'no master owns slot {slot}'}")


@dataclass
class SlotOwners:
    """Which master owns a slot, read from any node that answers (the seeds first, then
    every node seen since). A connection asks when it connects, so the answer is the
    cluster's current one, not a cached layout."""

    url: ClusterUrl
    timeout: float
    retry_seconds: float = 0.0  # how long a connection is tried again (see _Pinned)
    known: list[tuple[str, int]] = field(default_factory=list)
    reached: bool = False  # has any node answered yet

    async def master_of(self, slot: int) -> tuple[str, int]:
        errors: list[str] = []
        for host, port in dict.fromkeys([*self.url.nodes, *self.known]):
            node = Redis(
                host=host,
                port=port,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                decode_responses=True,
                **self.url.connection_kwargs(),
            )
            try:
                layout = await node.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            except (RedisError, OSError) as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                with contextlib.suppress(Exception):
                    await node.aclose()
            self.reached = True
            owner = self._owner(layout, slot)
            if owner is not None:
                return owner
            errors.append(f"{host}:{port}: no master owns slot {slot}")
        raise ConnectionError(f"Redis Cluster: {'; '.join(errors) or 'no node answered'}")

    def _owner(self, layout: Any, slot: int) -> tuple[str, int] | None:
        found = None
        for start, end, master, *replicas in layout:
            for node in (master, *replicas):
                address = (str(node[0]), int(node[1]))
                if address[0] and address not in self.known:
                    self.known.append(address)
            if int(start) <= slot <= int(end):
                found = (str(master[0]), int(master[1]))
        return found


class _Pinned:
    """Mixed into a connection class: connect to the master owning `pinned_slot`, and
    treat a redirection as a lost connection (the command did not run; the next
    connect finds the new owner)."""

    pinned_slot: int
    pinned_owners: SlotOwners
    host: str
    port: int

    def __init__(self, *args: Any, pinned_slot: int, pinned_owners: SlotOwners, **kwargs: Any):
        self.pinned_slot = pinned_slot
        self.pinned_owners = pinned_owners
        super().__init__(*args, **kwargs)

    async def connect(self) -> None:
        """Find the slot's master and connect to it, trying again for the retry window
        while that fails (the master dead, no master yet: a failover): nothing was sent.
        A cluster no node of which has answered yet is not waited for."""
        if self.is_connected:  # type: ignore[attr-defined]
            return
        owners = self.pinned_owners
        deadline = time.monotonic() + owners.retry_seconds
        pause = 0.05
        while True:
            try:
                try:
                    self.host, self.port = await owners.master_of(self.pinned_slot)
                except ConnectionError as exc:
                    raise NotConnected(str(exc)) from exc
                await super().connect()  # type: ignore[misc]
                return
            except NotConnected:
                if not owners.reached or time.monotonic() + pause > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError as exc:
            if not str(exc).startswith(_REDIRECTS):
                raise
            response = exc
        if isinstance(response, ResponseError) and str(response).startswith(_REDIRECTS):
            await self.disconnect()  # type: ignore[attr-defined]
            raise NotConnected(f"Redis Cluster: slot {self.pinned_slot} moved: {response}")
        return response


_PINNED: dict[type, type] = {}


def pinned_class(cls: type[Connection]) -> type[Connection]:
    if cls not in _PINNED:
        _PINNED[cls] = type(f"Pinned{cls.__name__}", (_Pinned, cls), {})
    return _PINNED[cls]


def pinned_pool(
    url: ClusterUrl,
    tag: str,
    *,
    connection_class: type[Connection],
    max_connections: int | None,
    retry_seconds: float = 0.0,
    **kwargs: Any,
) -> ConnectionPool:
    """A pool of connections to the master owning `{tag}`'s slot: bounded (waiting for
    a free connection) with `max_connections`, else opening connections as needed. A
    connection that cannot be made is tried again for `retry_seconds`."""
    base = connection_class
    if url.tls and not issubclass(base, SSLConnection):
        raise ValueError("a TLS cluster URL needs an SSL connection class")
    owners = SlotOwners(url, float(kwargs.get("socket_connect_timeout") or 5.0), retry_seconds)
    kwargs.update(url.connection_kwargs())
    kwargs.pop("ssl", None)
    first = url.nodes[0]
    kwargs.update(
        connection_class=pinned_class(base),
        host=first[0],
        port=first[1],
        pinned_slot=tag_slot(tag),
        pinned_owners=owners,
    )
    if max_connections is None:
        return ConnectionPool(**kwargs)
    return BlockingConnectionPool(max_connections=max_connections, timeout=None, **kwargs)
