"""Redis Sentinel: `ASKQ_REDIS_URL=redis+sentinel://[user:pass@]host:port[,host:port...]/service[/db]`.

The sentinels (port 26379 when none is given) tell where the master of `service` is;
askq connects to that master with the URL's credentials and database (the sentinels
themselves are asked without credentials). Every askq connection rule holds as it does
on a plain Redis (askq.redis._connections):

- one bounded command pool per process, which WAITS when every connection is busy:
  redis-py's `SentinelConnectionPool` raises "Too many connections" instead, so the
  pool here is that pool over redis-py's `BlockingConnectionPool`;
- one dedicated single-connection client per blocking loop;
- commands packed by hiredis, and a failure to connect (no master known, the master
  refusing) is `NotConnected`: the command was not sent;
- a master demoted under a connection (`READONLY`, which redis-py's sentinel
  connection already turns into a connection error and a reconnect) or refusing writes
  for want of replicas (`NOREPLICAS`, with `min-replicas-to-write`) is a connection
  error that came after the command was sent: whether it ran is unknown to askq, so an
  ask is sent again as a repeat of itself until the new master answers, exactly as
  after a lost reply.

A connection learns the master's address when it connects, so a failover reaches each
connection when its old master drops it (Sentinel kills the demoted master's clients)
or refuses it a write. While a connection cannot be made (the sentinels name a master
that is dead, or none yet) it asks them again, for `ASKQ_SENTINEL_RETRY_SECONDS`: an
ask made during a failover waits for the new master, as on a Redis Cluster. arq gets
the same sentinels through the same connections.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
)
from redis.exceptions import BusyLoadingError, ReadOnlyError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..protocol._errors import AskError, ErrorCode
from ..protocol._settings import Settings
from ._wire import mixed, redacted, with_hiredis_packing

SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379

# Replies of a master that a failover is moving: demoted (READONLY), without its
# replicas (NOREPLICAS), or a new one still loading its data set. Nothing was written.
_FAILOVER_REPLY = re.compile(r"(?:^|\(')(READONLY|NOREPLICAS|MASTERDOWN|LOADING) ")


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SCHEME + "://")


@dataclass(frozen=True)
class SentinelTarget:
    """What a `redis+sentinel://` URL names."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, service and database of the URL, or CONFIG_ERROR naming what is
    wrong (the password never shown)."""
    def bad(what: str) -> AskError:
        return AskError(ErrorCode.CONFIG_ERROR, f"Redis URL {redacted(url)}: {what}")

    if not is_sentinel_url(url):
        raise bad(f"not a {SCHEME}:// URL")
    rest = url[len(SCHEME) + 3 :]
    if "?" in rest or "#" in rest:
        raise bad("a Sentinel URL takes no query or fragment (service and database go in the path)")
    netloc, _, path = rest.partition("/")
    username = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None if colon else None
        password = unquote(secret if colon else user) or None
    sentinels: list[tuple[str, int]] = []
    for node in netloc.split(","):
        node = node.strip()
        host, port = node, ""
        if ":" in node and not node.endswith("]"):  # host:port, [v6]:port; not [v6]
            host, _, port = node.rpartition(":")
            if not port.isdigit():
                raise bad(f"sentinel {node!r}: port {port!r} is not a number")
        host = host.strip("[]")
        if not host:
            raise bad(f"sentinel {node!r} has no host (host:port, comma-separated)")
        sentinels.append((host, int(port) if port else DEFAULT_SENTINEL_PORT))
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        raise bad("no service name: redis+sentinel://host:port[,host:port...]/SERVICE[/DB]")
    if len(parts) > 2:
        raise bad("the path is /SERVICE or /SERVICE/DB")
    if len(parts) == 2 and not parts[1].isdigit():
        raise bad(f"database {parts[1]!r} is not a number (0, 1, ...)")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=parts[0],
        db=int(parts[1]) if len(parts) == 2 else 0,
        username=username,
        password=password,
    )


def failover_reply(exc: BaseException) -> bool:
    """A Redis error reply (also one redis-py annotated inside a pipeline's error) that
    says the master is moving, not that the command was wrong: whoever runs the command
    reconnects and tries again, as after a lost connection."""
    if isinstance(exc, ReadOnlyError | BusyLoadingError):  # redis-py strips their code
        return True
    return isinstance(exc, ResponseError) and bool(_FAILOVER_REPLY.search(str(exc)))


class _Sentinels(Sentinel):
    """redis-py's sentinel manager, noting whether a sentinel has answered that it
    monitors the service (then "no master found" is a failover under way, not a URL
    naming a service nobody monitors), and believing the newest configuration.

    redis-py takes the first sentinel's word for where the master is. Right after a
    failover a sentinel that has not yet heard of it still names the old master; once
    a supervisor has restarted that node (empty, without persistence, and a master
    until the sentinels make it a replica), a client that believed it wrote asks to a
    node whose data the sentinels then wipe: every question asked there was lost. So
    every sentinel is asked and the master of the highest `config-epoch` (the failover
    that happened last) wins."""

    monitors = False

    def check_master_state(self, state: dict[str, Any], service_name: str) -> bool:
        self.monitors = True  # called only with a sentinel's state of the service
        return bool(super().check_master_state(state, service_name))

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        async def ask(sentinel: Any) -> dict[str, Any] | BaseException:
            try:
                masters: dict[str, Any] = await sentinel.sentinel_masters()
                return masters.get(service_name) or {}
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                return exc

        answers = await asyncio.gather(*(ask(s) for s in self.sentinels))
        return _newest_master(self, service_name, answers)


def _newest_master(
    manager: Any, service_name: str, answers: list[dict[str, Any] | BaseException]
) -> tuple[str, int]:
    """Of every sentinel's answer (its state of the service, or why it did not answer),
    the master of the highest config-epoch that the sentinel holds up; or
    MasterNotFoundError naming the sentinels that did not answer."""
    valid = [
        state
        for state in answers
        if isinstance(state, dict) and state and manager.check_master_state(state, service_name)
    ]
    if valid:
        newest = max(valid, key=lambda state: int(state.get("config-epoch", 0)))
        return newest["ip"], int(newest["port"])
    errors = [
        f"{sentinel} - {answer!r}"
        for sentinel, answer in zip(manager.sentinels, answers, strict=True)
        if isinstance(answer, BaseException)
    ]
    raise MasterNotFoundError(
        f"No master found for {service_name!r}" + (f" : {', '.join(errors)}" if errors else "")
    )


class _SentinelMaster(SentinelManagedConnection):
    """A master connection that waits through a failover: while the connection cannot
    be made (the sentinels know no master, or name one that refuses: it died and is
    not yet replaced) it asks the sentinels again, for `ASKQ_SENTINEL_RETRY_SECONDS`.
    Nothing was sent, so nothing can run twice. It is not waited for when no sentinel
    has ever said it monitors the service and no master was ever reached (nothing
    answering where the URL points, or a service name nobody monitors: at once, as a
    single Redis that is not there).

    It also treats `NOREPLICAS` as the failover it is: the master refused the write
    because its replicas are gone or lagging (`min-replicas-to-write`), so nothing was
    written, and the next connection asks the sentinels again."""

    async def connect(self) -> None:
        pool = self.connection_pool
        deadline = time.monotonic() + pool.retry_seconds
        pause = 0.05
        while True:
            try:
                await super().connect()  # type: ignore[no-untyped-call]
                pool.reached = True
                return
            except (RedisConnectionError, RedisTimeoutError, OSError):
                waits = pool.reached or pool.sentinel_manager.monitors
                if not waits or time.monotonic() + pause > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if not str(exc).startswith("NOREPLICAS"):
                raise
            await self.disconnect()
            raise RedisConnectionError(f"the master refused the write: {exc}") from exc


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's sentinel pool, bounded and waiting when every connection is busy
    (its `get_connection` is the blocking pool's; connecting asks the sentinels).
    Closing it closes its sentinel connections too. `retry_seconds`: how long its
    connections try again to reach a master (`_SentinelMaster`)."""

    retry_seconds = 0.0
    reached = False  # has a connection of this pool reached a master yet

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        # get_master_address disconnects the idle connections (inuse_connections=False)
        # when the master moved; only a full close (the client's) drops the sentinels.
        if inuse_connections:
            for sentinel in self.sentinel_manager.sentinels:
                await sentinel.aclose(close_connection_pool=True)


def _manager(target: SentinelTarget, settings: Settings) -> _Sentinels:
    timeouts = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_timeout,
    }
    return _Sentinels(list(target.sentinels), sentinel_kwargs=timeouts)  # type: ignore[no-untyped-call]


def sentinel_client(
    settings: Settings,
    name: str | None,
    *,
    max_connections: int,
    socket_timeout: float,
    client_class: type[Redis] = Redis,
    mixin: type | None = None,
    **extra: Any,
) -> Any:
    """A client of the service's master through the URL's sentinels: at most
    `max_connections` connections, waiting for one when all are busy. `client_class`,
    `mixin` and `extra` as `_connections.pinned_client` takes them (arq's client)."""
    target = parse_sentinel_url(settings.redis_url)
    kwargs: dict[str, Any] = {
        "db": target.db,
        "username": target.username,
        "password": target.password,
        "decode_responses": True,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": settings.socket_timeout,
        "retry_on_timeout": False,
    }
    if name:
        kwargs["client_name"] = name
    kwargs.update(extra)
    connection_class = with_hiredis_packing(_SentinelMaster)
    if mixin is not None:
        connection_class = mixed(mixin, connection_class)
    pool = BlockingSentinelPool(  # type: ignore[no-untyped-call]
        target.service,
        _manager(target, settings),
        connection_class=connection_class,
        max_connections=max_connections,
        timeout=None,
        **kwargs,
    )
    pool.retry_seconds = settings.sentinel_retry_seconds
    return client_class(connection_pool=pool)


def sync_sentinel_client(settings: Settings, name: str) -> Any:
    """A synchronous client of the master (the metrics scrape's)."""
    from redis.sentinel import Sentinel as SyncSentinel

    class NewestSentinels(SyncSentinel):
        """The master of the newest configuration, as `_Sentinels` finds it."""

        def discover_master(self, service_name: str) -> tuple[str, int]:
            answers: list[dict[str, Any] | BaseException] = []
            for sentinel in self.sentinels:
                try:
                    masters: dict[str, Any] = sentinel.sentinel_masters()  # type: ignore[no-untyped-call]
                    answers.append(masters.get(service_name) or {})
                except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                    answers.append(exc)
            return _newest_master(self, service_name, answers)

    target = parse_sentinel_url(settings.redis_url)
    timeouts = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_timeout,
    }
    manager = NewestSentinels(list(target.sentinels), sentinel_kwargs=timeouts, **timeouts)  # type: ignore[no-untyped-call]
    return manager.master_for(  # type: ignore[no-untyped-call]
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        decode_responses=True,
        client_name=name,
    )
