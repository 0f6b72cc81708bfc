"""A channel's own state in Redis (`GroupHandle.store`), for what every replica of its
group must see: a click may land at any replica, a send may run at any replica, and a
replica may die at any point.

Keys live under `{prefix}:<channel kind>:<group>:` (the deployment's hash tag): every key
a channel keeps is its group's, never its kind's, so two groups of one kind (an email
group and its escalation tier, with their own recipients) never read each other's
records, leases or guards. Each key expires `ASKQ_SETTLED_TTL` after its last write,
like the requests they belong to, unless it is written as lasting (what a platform
gives only once). Two guards come with it: `once` (the first caller within a time
wins: show an outcome once, remind at most once a minute) and a lease (one caller at a
time does a thing, e.g. posts a message; a caller that died lets the lease run out). A
counter (`count`) tells how often a thing happened within a window (sign-in attempts).
A feed (a capped stream) carries what every replica must hear at once: `publish`
appends, `follow` reads it in a blocking loop of its own (the web inbox tells every
replica's live pages of a new or settled question this way).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from ..protocol._settings import Settings
from ..redis._blocking import BlockingLoop
from ..redis._connections import blocking_client, redis_errors

FEED_BATCH = 100


class ChannelStore:
    def __init__(self, redis: Redis, base: str, namespace: str, settings: Settings) -> None:
        self._redis = redis
        self._prefix = f"{base}:{namespace}:"
        self._base = base
        self._legacy: str | None = None  # see read_also
        self._settings = settings
        self.ttl = settings.settled_ttl  # seconds a key lasts after its last write

    def key(self, name: str) -> str:
        return self._prefix + name

    def read_also(self, namespace: str | None) -> None:
        """Read records (hashes) written under `{base}:<namespace>:` too, as if they
        were this store's: those an older version kept per channel kind, for a group
        that is the only one of its kind (the runtime decides). A field found here wins;
        deletes reach both; writes, guards, leases, counters and feeds are this store's
        alone. None: stop."""
        self._legacy = None if namespace is None else f"{self._base}:{namespace}:"

    def _old(self, name: str) -> str | None:
        return None if self._legacy is None else self._legacy + name

    # --- records (hashes) ----------------------------------------------------------------

    async def fields(self, name: str, *fields: str) -> list[str | None]:
        old = self._old(name)
        with redis_errors(self._settings):
            if old is None:
                found: list[str | None] = await self._redis.hmget(self.key(name), list(fields))  # type: ignore[misc]
                return found
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hmget(self.key(name), list(fields))
                pipe.hmget(old, list(fields))
                new, legacy = await pipe.execute()
        return [n if n is not None else o for n, o in zip(new, legacy, strict=True)]

    async def all_fields(self, name: str) -> dict[str, str]:
        old = self._old(name)
        with redis_errors(self._settings):
            if old is None:
                found: dict[str, str] = await self._redis.hgetall(self.key(name))  # type: ignore[misc]
                return found
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(self.key(name))
                pipe.hgetall(old)
                new, legacy = await pipe.execute()
        return {**legacy, **new}

    async def set_fields(
        self,
        name: str,
        values: Mapping[str, str],
        *,
        keep: bool = False,
        drop_lease: str | None = None,
        lasting: bool = False,
    ) -> None:
        """Write fields of record `name` (`keep`: only those not set yet) and renew its
        expiry; `drop_lease`: end that lease in the same step (the thing it guarded is
        done and recorded). `lasting`: the record does not expire, it lasts until it is
        deleted: for what a platform gives once and never again (Teams' conversation
        references come at installation), which no TTL may take away while the
        channel's replicas are down. Write a lasting record always as lasting."""
        key = self.key(name)
        with redis_errors(self._settings):
            async with self._redis.pipeline(transaction=True) as pipe:
                for field, value in values.items():
                    if keep:
                        pipe.hsetnx(key, field, value)
                    else:
                        pipe.hset(key, field, value)
                if lasting:
                    pipe.persist(key)
                else:
                    pipe.expire(key, self.ttl)
                if drop_lease is not None:
                    pipe.delete(self._lease(drop_lease))
                await pipe.execute()

    async def set_fields_unless_newer(
        self, name: str, values: Mapping[str, str], stamp_field: str, stamp: float
    ) -> bool:
        """Write fields of `name` with `stamp` in `stamp_field`, unless the record already
        holds a later stamp there (updates handled out of order, at several replicas).
        True when written."""
        key = self.key(name)
        with redis_errors(self._settings):
            async with self._redis.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(key)
                        newest = await pipe.hget(key, stamp_field)  # type: ignore[misc]
                        if newest is not None and float(newest) > stamp:
                            return False
                        pipe.multi()  # type: ignore[no-untyped-call]
                        pipe.hset(key, mapping={**values, stamp_field: repr(stamp)})
                        pipe.expire(key, self.ttl)
                        await pipe.execute()
                        return True
                    except WatchError:
                        continue  # changed meanwhile: look again

    async def delete_fields(self, name: str, *fields: str) -> None:
        """Remove fields of record `name` (the record goes when its last field does)."""
        if fields:
            old = self._old(name)
            with redis_errors(self._settings):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hdel(self.key(name), *fields)
                    if old is not None:
                        pipe.hdel(old, *fields)
                    await pipe.execute()

    async def delete(self, name: str) -> None:
        old = self._old(name)
        with redis_errors(self._settings):
            await self._redis.delete(self.key(name), *([old] if old is not None else []))

    # --- guards --------------------------------------------------------------------------

    async def once(self, name: str, seconds: int) -> bool:
        """True the first time `name` is asked for within `seconds`."""
        with redis_errors(self._settings):
            return bool(await self._redis.set(self.key(name), "1", nx=True, ex=seconds))

    async def forget_once(self, name: str) -> None:
        """What `once` guarded failed: the next ask for `name` is the first again."""
        await self.delete(name)

    async def count(self, name: str, seconds: int) -> tuple[int, int]:
        """Count one more `name` in a window of `seconds` that starts at its first count:
        (the count so far, seconds left in the window). One small key per name, gone
        with its window; shared by every replica (e.g. sign-in attempts per address)."""
        key = self.key(f"count:{name}")
        with redis_errors(self._settings):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, 0, nx=True, ex=seconds)
                pipe.incr(key)
                pipe.ttl(key)
                _, counted, left = await pipe.execute()
        return int(counted), max(int(left), 1)

    def _lease(self, name: str) -> str:
        return self.key(f"lease:{name}")

    async def lease(self, name: str, seconds: int) -> bool:
        """True when this caller holds the lease `name` now (for `seconds`); False while
        another does."""
        with redis_errors(self._settings):
            return bool(await self._redis.set(self._lease(name), "1", nx=True, ex=seconds))

    async def lease_left(self, name: str) -> float:
        """Seconds until the lease `name` runs out (at least 1)."""
        with redis_errors(self._settings):
            ttl = await self._redis.ttl(self._lease(name))
        return float(max(ttl, 1))

    async def drop_lease(self, name: str) -> None:
        with redis_errors(self._settings):
            await self._redis.delete(self._lease(name))

    # --- feeds ---------------------------------------------------------------------------

    async def publish(self, feed: str, event: Mapping[str, str], *, maxlen: int = 1000) -> str:
        """Append `event` to `feed` (capped near `maxlen`); its id."""
        key = self.key(feed)
        fields: dict[Any, Any] = dict(event)
        with redis_errors(self._settings):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.xadd(key, fields, maxlen=maxlen, approximate=True)
                pipe.expire(key, self.ttl)
                event_id, _ = await pipe.execute()
        return str(event_id)

    async def recent(self, feed: str, count: int) -> list[tuple[str, dict[str, str]]]:
        """The last `count` events of `feed`, newest first, with their ids."""
        with redis_errors(self._settings):
            found: list[tuple[str, dict[str, str]]] = await self._redis.xrevrange(
                self.key(feed), count=count
            )
        return found

    def follow(
        self,
        feed: str,
        deliver: Callable[[str, dict[str, str]], None],
        *,
        on_gap: Callable[[], Awaitable[None]] | None = None,
    ) -> FeedFollower:
        """A follower of `feed`: once started, `deliver(id, event)` is called for every
        event published after the start, in order, on a connection of its own.
        `on_gap` runs after a reconnect (events may have been missed)."""
        return FeedFollower(self, feed, deliver, on_gap)


class FeedFollower:
    def __init__(
        self,
        store: ChannelStore,
        feed: str,
        deliver: Callable[[str, dict[str, str]], None],
        on_gap: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self._store = store
        self._key = store.key(feed)
        self._deliver = deliver
        self._on_gap = on_gap
        self._from = "$"
        settings = store._settings
        self._block_ms = int(settings.block_seconds * 1000)
        self._loop = BlockingLoop(
            f"askq-feed-{feed}",
            lambda: blocking_client(store._redis, settings, None),
            self._read,
            self._gap,
        )

    async def start(self) -> None:
        """Follow from the feed's current end (what was published before is not
        delivered)."""
        with redis_errors(self._store._settings):
            last = await self._store._redis.xrevrange(self._key, count=1)
        self._from = last[0][0] if last else "0-0"
        self._loop.start()

    async def close(self) -> None:
        await self._loop.close()

    async def _read(self, conn: Redis) -> None:
        reply = await conn.xread({self._key: self._from}, count=FEED_BATCH, block=self._block_ms)
        for _, entries in reply or []:
            for event_id, fields in entries:
                self._from = event_id
                self._deliver(event_id, fields)

    async def _gap(self, conn: Redis) -> None:
        if self._on_gap is not None:
            await self._on_gap()
