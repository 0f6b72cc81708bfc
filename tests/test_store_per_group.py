"""A channel's store (`GroupHandle.store`) is its group's: two groups of one kind keep
their records, guards, leases and counters apart. Records an older version kept per
kind (`{p}:<kind>:`) are read by a group that is the only one of its kind, and by no
group that shares the kind with another (whose records they might be)."""

from __future__ import annotations

import pytest
from conftest import Backend, running

from askq import Seam
from askq.answerers.memory import MemoryAnswerer

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)


async def test_two_groups_of_one_kind_keep_their_records_apart(
    backend: Backend, seam: Seam
) -> None:
    one, two = MemoryAnswerer(), MemoryAnswerer()
    async with running(seam, one, "one"), running(seam, two, "two"):
        a, b = one.group.store, two.group.store
        await a.set_fields("msg:r1", {"r:alice@acme.example": "sent"})
        assert await b.all_fields("msg:r1") == {}
        assert await b.fields("msg:r1", "r:alice@acme.example") == [None]
        assert await a.once("remind:r1", 60)
        assert await b.once("remind:r1", 60)  # its own guard, not the other group's
        assert await a.lease("r1", 60)
        assert await b.lease("r1", 60)
        assert (await a.count("signin:addr:127.0.0.1", 60))[0] == 1
        assert (await b.count("signin:addr:127.0.0.1", 60))[0] == 1
        assert a.key("msg:r1") == f"{seam.keys.base}:memory:one:msg:r1"
        assert b.key("msg:r1") == f"{seam.keys.base}:memory:two:msg:r1"


def _write_old_record(backend: Backend, seam: Seam, name: str, values: dict[str, str]) -> str:
    """A record as a version before per-group stores wrote it: under `{p}:<kind>:`."""
    key = f"{seam.keys.base}:memory:{name}"
    client = backend.sync_client()
    try:
        client.hset(key, mapping=values)
        client.expire(key, 3600)
    finally:
        client.close()
    return key


async def test_the_only_group_of_its_kind_reads_what_an_older_version_recorded(
    backend: Backend, seam: Seam
) -> None:
    old = _write_old_record(backend, seam, "msg:r2", {"channel": "C1", "ts": "1.000001"})
    lone = MemoryAnswerer()
    async with running(seam, lone, "lone"):
        store = lone.group.store
        assert await store.fields("msg:r2", "channel", "ts", "outcome") == ["C1", "1.000001", None]
        await store.set_fields("msg:r2", {"outcome": "x", "ts": "2.000002"})
        assert await store.all_fields("msg:r2") == {
            "channel": "C1",
            "ts": "2.000002",
            "outcome": "x",
        }
        await store.delete("msg:r2")  # gone from both places
        assert await store.all_fields("msg:r2") == {}
    client = backend.sync_client()
    try:
        assert not client.exists(old)
    finally:
        client.close()


async def test_a_group_sharing_its_kind_never_reads_the_old_per_kind_records(
    backend: Backend, seam: Seam
) -> None:
    """With another group of the kind registered, the old record may be the other
    group's (the mistake this fixes): it is not read."""
    _write_old_record(backend, seam, "msg:r3", {"r:alice@acme.example": "sent"})
    first, second = MemoryAnswerer(), MemoryAnswerer()
    async with running(seam, first, "first"), running(seam, second, "second"):
        assert await second.group.store.all_fields("msg:r3") == {}
