"""Shards: one deployment's keys spread over N hash tags (`ASKQ_SHARDS`).

With one hash tag every key of a deployment sits in one Redis Cluster slot, so on
one master: a cluster adds failover, never throughput. With N shards the deployment
has N tags; each shard is a whole keyspace of its own (`Keys` with that tag: requests,
turns, the registry, tier streams, events, timers, callers), so every script still
touches keys of one tag only and stays one atomic step.

- Shard 0 of 1 is `{prefix}`: `ASKQ_SHARDS=1` (the default) is the layout askq always
  had, key for key.
- With N > 1, shard i's tag is `prefix~k` for the smallest k whose slot lies in the
  middle half of slot range [i*16384/N, (i+1)*16384/N): the N tags are spread evenly
  over the slots, so a cluster whose masters own even slot ranges (what
  `redis-cli --cluster create` makes) puts them on different masters; the middle half
  keeps a tag off a range's edge, where masters' ranges and ours may differ by one.
  Every process computes the same tags from the prefix and N alone.
- A request's shard follows from its turn (CRC-32 of the turn id, mod N): every
  request of a turn is in one shard, so `abort_turn` stays one script.
- A request id carries its shard: it is 32 hex digits as before, and its last four,
  read as a number, are the shard mod N. Any process finds a request's shard from the
  id alone (a channel answering a link, `askq show`, the sweeper firing a timer).
- What belongs to the deployment, not a shard (the sweepers' beats, arq's queues, a
  channel's store, the `{prefix}:shards` marker) stays under the plain `{prefix}` tag.
"""

from __future__ import annotations

import secrets
import uuid
import zlib
from dataclasses import dataclass, field
from functools import cached_property

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from ._keys import Keys

MAX_SHARDS = 1024  # an id's last four hex digits hold the shard (65536 values)
_ID_SPACE = 1 << 16


def shard_tag(prefix: str, shard: int, shards: int) -> str:
    """The hash tag of shard `shard` of `shards` (see the module's docstring)."""
    if shards == 1:
        return prefix
    low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    quarter = (high - low) // 4
    inner = (low + quarter, high - quarter) if quarter else (low, high)
    k = 0
    while True:
        tag = f"{prefix}~{k}"
        if inner[0] <= key_slot(tag.encode()) < inner[1]:
            return tag
        k += 1


def _bytes(text: str) -> bytes:
    # Total: an id the API refuses (a lone surrogate) still has a shard, so a lookup
    # of it (`Seam.settlement`) finds nothing rather than failing.
    return text.encode("utf-8", "surrogatepass")


def marker_key(prefix: str) -> str:
    """Records the deployment's number of shards (under the plain prefix's tag)."""
    return "{" + prefix + "}:shards"


@dataclass(frozen=True)
class Layout:
    """The deployment's shards: their keys, and where a turn or a request belongs."""

    prefix: str = "askq"
    shards: int = 1
    _keys: tuple[Keys, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards: {self.shards} is not in 1..{MAX_SHARDS}")
        tags = [shard_tag(self.prefix, i, self.shards) for i in range(self.shards)]
        keys = tuple(Keys(self.prefix, tag if tag != self.prefix else None) for tag in tags)
        object.__setattr__(self, "_keys", keys)

    @cached_property
    def deployment(self) -> Keys:
        """The keys under the plain `{prefix}` tag (deployment-wide)."""
        return Keys(self.prefix)

    @property
    def marker(self) -> str:
        return marker_key(self.prefix)

    def keys(self, shard: int) -> Keys:
        return self._keys[shard]

    @property
    def all_keys(self) -> tuple[Keys, ...]:
        return self._keys

    def of_turn(self, turn_id: str) -> int:
        if self.shards == 1:
            return 0
        return zlib.crc32(_bytes(turn_id)) % self.shards

    def of_request(self, request_id: str) -> int:
        """The shard a request id names (an id askq did not make: a stable guess, so a
        lookup of it finds nothing rather than failing)."""
        if self.shards == 1:
            return 0
        try:
            return int(request_id[-4:], 16) % self.shards
        except ValueError:
            return zlib.crc32(_bytes(request_id)) % self.shards

    def new_id(self, shard: int) -> str:
        """A new request id (32 hex digits) naming `shard`."""
        if self.shards == 1:
            return uuid.uuid4().hex
        head = uuid.uuid4().hex[:28]
        tail = shard + self.shards * secrets.randbelow(_ID_SPACE // self.shards)
        return f"{head}{tail:04x}"
