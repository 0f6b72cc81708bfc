"""Connections: one bounded pool per process for commands, plus one dedicated
connection per blocking loop. On a Redis Cluster (`redis+cluster://`, `_cluster.py`)
the command client is redis-py's cluster client, bounded the same way, and a blocking
loop's connection is pinned to the master that owns the deployment's slot.

Why bounded: 10,000 asks pending in one process must not mean 10,000 connections. A
pending ask holds no connection at all (it waits on a future the reply waiter
resolves); a command borrows a pool connection for one round trip, and when all are
busy it waits for one instead of opening another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.connection import Connection, SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..protocol._errors import AskError, ErrorCode
from ..protocol._settings import Settings
from . import _cluster
from ._full import episode, full, is_full
from ._sentinel import is_sentinel_url, parse_sentinel_url, sentinel_client
from ._wire import NotConnected, mixed, redacted, with_hiredis_packing

# What a lost or unreachable server raises in redis-py (OSError covers refused sockets).
CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


def _base_kwargs(
    source: Redis | None, settings: Settings, name: str | None
) -> tuple[type, dict[str, Any]]:
    if _cluster.is_cluster_url(settings.redis_url):
        return _cluster_kwargs(settings, name)
    if source is None:
        template = ConnectionPool.from_url(settings.redis_url)
        cls, kwargs = template.connection_class, dict(template.connection_kwargs)
    else:
        pool = source.connection_pool
        cls, kwargs = pool.connection_class, dict(pool.connection_kwargs)
    cls = with_hiredis_packing(cls)
    kwargs["decode_responses"] = True
    if name:
        kwargs["client_name"] = name  # CLIENT LIST shows which process holds what
    # A failed command is reported, not silently re-sent: re-sending a blocking read or
    # a non-idempotent script after a lost reply is exactly what must not happen here.
    kwargs.pop("retry", None)
    kwargs["retry_on_timeout"] = False
    kwargs.setdefault("socket_connect_timeout", settings.socket_timeout)
    return cls, kwargs


def _cluster_kwargs(settings: Settings, name: str | None) -> tuple[type, dict[str, Any]]:
    url = _cluster.ClusterUrl.parse(settings.redis_url)
    cls = with_hiredis_packing(SSLConnection if url.tls else Connection)
    kwargs: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": settings.socket_timeout,
    }
    if name:
        kwargs["client_name"] = name
    return cls, kwargs


def command_client(source: Redis | None, settings: Settings, name: str | None = None) -> Redis:
    """The process's command client: at most `max_connections` connections."""
    if source is None and is_sentinel_url(settings.redis_url):  # Sentinel: _sentinel.py
        client: Redis = sentinel_client(
            settings,
            name,
            max_connections=settings.max_connections,
            socket_timeout=settings.socket_timeout,
        )
        return client
    cls, kwargs = _base_kwargs(source, settings, name)
    kwargs["socket_timeout"] = settings.socket_timeout
    if _cluster.is_cluster_url(settings.redis_url):
        # Typed as the single-Redis client it stands in for: askq calls on it only
        # commands both have (keyed commands, scripts, pipelines without MULTI).
        return cast(
            Redis,
            _cluster.cluster_client(
                _cluster.ClusterUrl.parse(settings.redis_url),
                connection_class=cls,
                not_connected=NotConnected,
                retry_seconds=settings.cluster_retry_seconds,
                max_connections=settings.max_connections,
                **kwargs,
            ),
        )
    pool = BlockingConnectionPool(
        connection_class=cls, max_connections=settings.max_connections, timeout=None, **kwargs
    )
    return Redis(connection_pool=pool)


def blocking_client(
    source: Redis | None, settings: Settings, name: str | None = None, tag: str | None = None
) -> Redis:
    """A single connection for one blocking loop (BLPOP, XREADGROUP BLOCK, XREAD BLOCK).
    On a cluster, to the master owning `tag`'s slot (a shard's; default: the prefix's).

    Its socket timeout exceeds the block time, so a long block is not mistaken for a
    dead server, while a dead server is still noticed within one block period.
    """
    timeout = settings.block_seconds + settings.socket_timeout
    client: Redis = _single_node(source, settings, name, timeout, 1, tag=tag)
    return client


def pinned_client(
    source: Redis | None,
    settings: Settings,
    name: str | None = None,
    *,
    client_class: type[Redis] = Redis,
    mixin: type | None = None,
    bounded: bool = True,
    **extra: Any,
) -> Any:
    """A client of plain connections to the one server holding the deployment's keys,
    for what needs WATCH and MULTI (arq's queue, a channel's `once`): on a cluster, the
    master owning the prefix's slot; on a single Redis, that Redis. `mixin` goes in
    front of the connection class (with `extra` as its kwargs). `bounded=False` gives
    a pool that opens connections as needed, as arq's own `create_pool` does."""
    return _single_node(
        source,
        settings,
        name,
        settings.socket_timeout,
        settings.max_connections if bounded else None,
        client_class=client_class,
        mixin=mixin,
        **extra,
    )


def _single_node(
    source: Redis | None,
    settings: Settings,
    name: str | None,
    timeout: float,
    size: int | None,
    *,
    client_class: type[Redis] = Redis,
    mixin: type | None = None,
    tag: str | None = None,
    **extra: Any,
) -> Any:
    if source is None and is_sentinel_url(settings.redis_url):  # Sentinel: _sentinel.py
        return sentinel_client(
            settings,
            name,
            max_connections=size or 2**31,
            socket_timeout=timeout,
            client_class=client_class,
            mixin=mixin,
            **extra,
        )
    cls, kwargs = _base_kwargs(source, settings, name)
    if mixin is not None:
        cls = mixed(mixin, cls)
    kwargs.update(extra)
    kwargs["socket_timeout"] = timeout
    if _cluster.is_cluster_url(settings.redis_url):
        pool: ConnectionPool = _cluster.pinned_pool(
            _cluster.ClusterUrl.parse(settings.redis_url),
            tag or settings.prefix,
            connection_class=cls,
            max_connections=size,
            retry_seconds=settings.cluster_retry_seconds,
            **kwargs,
        )
    elif size is None:
        pool = ConnectionPool(connection_class=cls, **kwargs)
    else:
        pool = BlockingConnectionPool(
            connection_class=cls, max_connections=size, timeout=None, **kwargs
        )
    return client_class(connection_pool=pool)


def check_redis_url(url: str) -> None:
    """CONFIG_ERROR naming what is wrong with a Redis URL (scheme, port, database,
    options), before anything connects. redis-py drops a database path that is not a
    number without a word, so askq would quietly use database 0; that is refused too."""
    if is_sentinel_url(url):  # Sentinel: _sentinel.py
        parse_sentinel_url(url)
        return
    where = f"Redis URL {redacted(url)}"
    if _cluster.is_cluster_url(url):
        try:
            _cluster.ClusterUrl.parse(url)
        except ValueError as exc:
            raise AskError(ErrorCode.CONFIG_ERROR, f"{where}: {exc}") from None
        return
    try:
        ConnectionPool.from_url(url)
        parts = urlsplit(url)
    except ValueError as exc:
        raise AskError(ErrorCode.CONFIG_ERROR, f"{where}: {exc}") from None
    db = parts.path.lstrip("/") if parts.scheme != "unix" else ""
    if db and not db.isdigit():
        raise AskError(
            ErrorCode.CONFIG_ERROR, f"{where}: database {db!r} is not a number (0, 1, ...)"
        )


async def server_ms(redis: Redis) -> int:
    """The server's clock, in ms: deadlines and liveness are all on it."""
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


@contextlib.contextmanager
def redis_errors(settings: Settings) -> Iterator[None]:
    """The one translation of a lost or unreachable server into an AskError
    (REDIS_UNAVAILABLE, naming the URL without its password). The cause is kept: it
    tells whether the command was sent (NotConnected) or may have run. A write refused
    because Redis is full is REDIS_UNAVAILABLE too, saying so (`_full.py`)."""
    try:
        yield
    except CONNECTION_ERRORS as exc:
        raise unavailable(settings, exc) from exc
    except ResponseError as exc:
        if not is_full(exc):
            raise
        episode.refused("command", say=False)  # (the AskError says it)
        raise full(redacted(settings.redis_url), exc) from exc


def unavailable(settings: Settings, exc: BaseException) -> AskError:
    error = AskError(
        ErrorCode.REDIS_UNAVAILABLE, f"cannot reach Redis at {redacted(settings.redis_url)}: {exc}"
    )
    error.__cause__ = exc  # whether the command was sent (NotConnected) or may have run
    return error
