"""Behaviour behind the speed work (issue 16), against fakeredis and real Redis: what
no longer costs a command, checked by counting the commands, never by timing."""

from __future__ import annotations

from typing import Any

from conftest import SEED, YES, YES_JSON, Backend, running

from askq import Caller
from askq.answerers.memory import MemoryAnswerer


async def test_asks_one_after_another_send_no_heartbeat_of_their_own(backend: Backend) -> None:
    """Each ask marks the caller process live itself (ask.lua): asks that follow one
    another need no SET of the process heartbeat between them."""
    async with backend.seam(caller_ttl=30) as seam:
        alive = seam.keys.alive(seam.process_id)
        beats: list[Any] = []
        real_set = seam.redis.set

        async def counting_set(name: Any, *args: Any, **kwargs: Any) -> Any:
            if name == alive:
                beats.append(name)
            return await real_set(name, *args, **kwargs)

        seam.redis.set = counting_set  # type: ignore[method-assign]
        async with running(seam, MemoryAnswerer(reply=lambda o: YES), "desk"):
            for i in range(20):
                answers = await seam.ask(SEED, Caller(agent_id="a", turn_id=f"t{i}"))
                assert answers.to_json() == YES_JSON
    assert beats == []
