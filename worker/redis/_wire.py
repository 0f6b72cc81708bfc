"""What every client askq opens shares on the wire, below the single-node, Cluster and
Sentinel clients alike (`_connections.py`, `_cluster.py`, `_sentinel.py`): commands
packed by hiredis, a failure to connect told apart from a command that may have run
(`NotConnected`), and Redis URLs with their passwords left out."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import hiredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_PASSWORD_QUERY = re.compile(r"((?:^|&)password=)[^&]*")


class NotConnected(RedisConnectionError):
    """The connection could not be made (refused, timed out, AUTH or SELECT failed):
    no command was sent on it. Any other connection error may come after a command
    reached the server, so whether that command ran is unknown."""


class _HiredisPacking:
    """Commands packed by hiredis (C), not redis-py's Python packer, which encodes and
    joins argument by argument: packing the scripts' ~30 keys and arguments took a
    third of a busy caller's CPU. Sent without a task per command (below). Also marks a
    failure to connect as `NotConnected`."""

    async def connect(self) -> None:
        try:
            await super().connect()  # type: ignore[misc]
        except NotConnected:
            raise
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise NotConnected(str(exc)) from exc
        except ResponseError as exc:  # SELECT of a database the server does not have
            raise NotConnected(str(exc)) from exc

    def pack_command(self, *args: Any) -> list[bytes]:
        # As redis-py does: a command name with spaces ("CLIENT SETNAME") is several
        # arguments on the wire.
        head = args[0]
        if isinstance(head, str) and " " in head:
            args = (*head.split(), *args[1:])
        elif isinstance(head, bytes) and b" " in head:
            args = (*head.split(), *args[1:])
        return [hiredis.pack_command(args)]

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        # redis-py bounds a send by `asyncio.wait_for`, a task and a timer per command;
        # here the bound is an `asyncio.timeout` around the only step that can wait (the
        # drain of a full write buffer): the same limit and the same errors, for about
        # 5 % fewer instructions per offer a worker handles (measured under callgrind).
        if not self.is_connected:  # type: ignore[attr-defined]
            await self.connect()
        elif check_health:
            await self.check_health()  # type: ignore[attr-defined]
        if isinstance(command, str):
            command = command.encode()
        if isinstance(command, bytes):
            command = [command]
        writer = self._writer  # type: ignore[attr-defined]
        try:
            writer.writelines(command)
            async with asyncio.timeout(self.socket_timeout):  # type: ignore[attr-defined]
                await writer.drain()
        except TimeoutError:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
        except BaseException:
            # A send cut short (cancelled) leaves the stream mid-command: the connection
            # cannot be used again, as in redis-py.
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise


_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def with_hiredis_packing(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """`cls` (TCP, TLS or Unix socket, from the URL) packing commands with hiredis."""
    if issubclass(cls, _HiredisPacking):
        return cls
    if cls not in _PACKING:
        _PACKING[cls] = type(f"Hiredis{cls.__name__}", (_HiredisPacking, cls), {})
    return _PACKING[cls]


_MIXED: dict[tuple[type, type], type] = {}


def mixed(mixin: type, cls: type) -> type:
    if (mixin, cls) not in _MIXED:
        _MIXED[(mixin, cls)] = type(f"{mixin.__name__.strip('_')}{cls.__name__}", (mixin, cls), {})
    return _MIXED[(mixin, cls)]


def redacted(url: str) -> str:
    """The URL with its password (and any `password=` query value) replaced by `***`:
    what every message, log line and status output shows of a Redis URL. Userinfo
    without a colon may be a bare password (`redis://secret@host`), so it goes too."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a Redis URL that cannot be parsed>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if colon else f"***@{host}"
    query = _PASSWORD_QUERY.sub(r"\1***", parts.query)
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )
