"""ChannelStore's feed (publish / follow / recent), `delete_fields` and lasting records:
what every replica of a group hears at once (the web inbox's live pages ride on it)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import Backend

from askq import ChannelStore, Seam

pytestmark = pytest.mark.cluster  # runs on the Redis Cluster too (conftest.py)


def _store(seam: Seam) -> ChannelStore:
    return ChannelStore(seam.single_node, seam.keys.base, "feedtest", seam.settings)


async def _until(events: list[tuple[str, dict[str, str]]], n: int) -> None:
    async with asyncio.timeout(5):
        while len(events) < n:
            await asyncio.sleep(0.01)


async def test_every_follower_hears_what_is_published_after_it_started(backend: Backend) -> None:
    async with backend.seam() as one, backend.seam() as two:
        store_a, store_b = _store(one), _store(two)
        await store_a.publish("feed", {"n": "before"})
        heard_a: list[tuple[str, dict[str, str]]] = []
        heard_b: list[tuple[str, dict[str, str]]] = []
        follow_a = store_a.follow("feed", lambda i, e: heard_a.append((i, e)))
        follow_b = store_b.follow("feed", lambda i, e: heard_b.append((i, e)))
        await follow_a.start()
        await follow_b.start()
        try:
            ids = [await store_b.publish("feed", {"n": str(n)}) for n in range(3)]
            await _until(heard_a, 3)
            await _until(heard_b, 3)
            assert heard_a == heard_b == [(i, {"n": str(n)}) for n, i in enumerate(ids)]
            recent = await store_a.recent("feed", 2)
            assert recent == [(ids[2], {"n": "2"}), (ids[1], {"n": "1"})]
        finally:
            await follow_a.close()
            await follow_b.close()


async def test_a_feed_is_capped_and_expires(seam: Seam, backend: Backend) -> None:
    store = _store(seam)
    # Concurrently (fakeredis over TCP is slow per transaction); real Redis trims
    # approximately, whole nodes of 100 entries, so it takes a few hundred to see it.
    await asyncio.gather(*(store.publish("capped", {"n": str(n)}, maxlen=10) for n in range(250)))
    last = await store.publish("capped", {"n": "last"}, maxlen=10)
    client = backend.sync_client()
    try:
        key = store.key("capped")
        assert client.xlen(key) < 250  # trimmed near 10 (approximately, as XADD ~ does)
        assert 0 < client.ttl(key) <= store.ttl
    finally:
        client.close()
    assert await store.recent("capped", 1) == [(last, {"n": "last"})]


async def test_delete_fields(seam: Seam) -> None:
    store = _store(seam)
    await store.set_fields("rec", {"a": "1", "b": "2"})
    await store.delete_fields("rec", "a")
    assert await store.all_fields("rec") == {"b": "2"}
    await store.delete_fields("rec")  # nothing named: nothing done
    await store.delete_fields("rec", "b")
    assert await store.all_fields("rec") == {}


async def test_a_lasting_record_does_not_expire(seam: Seam) -> None:
    """What a platform gives once (Teams' conversation references) is written as lasting:
    no TTL, even when it was first written as an ordinary, expiring record; other
    records keep theirs."""
    store = _store(seam)
    await store.set_fields("refs", {"c:1": "first"})
    assert 0 < await seam.single_node.ttl(store.key("refs")) <= seam.settings.settled_ttl
    await store.set_fields("refs", {"c:2": "second"}, lasting=True)
    assert await seam.single_node.ttl(store.key("refs")) == -1  # no expiry
    assert await store.all_fields("refs") == {"c:1": "first", "c:2": "second"}
    await store.set_fields("other", {"a": "1"})
    assert await seam.single_node.ttl(store.key("other")) > 0
    await store.delete("refs")  # it goes when deleted
    assert await store.all_fields("refs") == {}


async def test_a_follower_stops_on_close(seam: Seam) -> None:
    store = _store(seam)
    heard: list[tuple[str, dict[str, str]]] = []
    follower = store.follow("feed", lambda i, e: heard.append((i, e)))
    await follower.start()
    await follower.close()
    await store.publish("feed", {"n": "after"})
    await asyncio.sleep(0.2)
    assert heard == []
