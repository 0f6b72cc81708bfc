"""Behaviour behind the speed work (issue 16), against fakeredis and real Redis: what
no longer costs a command, checked by counting the commands, never by timing."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from typing import Any

from conftest import SEED, YES, YES_JSON, Backend, running
from test_processes import ASKQ, askq

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


def _loop_module(
    env: dict[str, str], *, without_uvloop: bool = False
) -> subprocess.CompletedProcess[str]:
    script = (
        "import asyncio, sys\n"
        + ("sys.modules['uvloop'] = None  # as if not installed\n" if without_uvloop else "")
        + "from askq.cli._loop import run_on_loop\n"
        "async def main():\n"
        "    return type(asyncio.get_running_loop()).__module__\n"
        "print(run_on_loop(main()))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_commands_run_on_the_loop_the_setting_names(backend: Backend) -> None:
    # auto (the default): uvloop where it is installed (the test environment has the
    # extra), asyncio where it is not.
    assert _loop_module(backend.env()).stdout.strip() == "uvloop"
    assert _loop_module(backend.env(ASKQ_EVENT_LOOP="auto")).stdout.strip() == "uvloop"
    without = _loop_module(backend.env(), without_uvloop=True)
    assert without.stdout.strip().startswith("asyncio"), without.stderr
    assert _loop_module(backend.env(ASKQ_EVENT_LOOP="asyncio")).stdout.strip().startswith("asyncio")
    assert _loop_module(backend.env(ASKQ_EVENT_LOOP="uvloop")).stdout.strip() == "uvloop"
    named = _loop_module(backend.env(ASKQ_EVENT_LOOP="uvloop"), without_uvloop=True)
    assert named.returncode != 0 and "needs uvloop" in named.stderr
    bogus = askq(backend, "ask", stdin=json.dumps(SEED), ASKQ_EVENT_LOOP="trio")
    assert bogus.returncode != 0
    assert bogus.stderr.startswith("CONFIG_ERROR: settings: ASKQ_EVENT_LOOP: ")


def test_a_round_trip_between_two_processes_on_uvloop(backend: Backend) -> None:
    env = backend.env(ASKQ_EVENT_LOOP="uvloop")
    worker = subprocess.Popen([*ASKQ, "worker", "auto"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert worker.stderr is not None
        ready, _, _ = select.select([worker.stderr], [], [], 20)
        assert ready and worker.stderr.readline().endswith(": ready\n")
        result = askq(backend, "ask", stdin=json.dumps(SEED), ASKQ_EVENT_LOOP="uvloop")
        assert (result.returncode, result.stdout, result.stderr) == (0, YES_JSON + "\n", "")
    finally:
        worker.kill()
        worker.wait(10)
        if worker.stderr:
            worker.stderr.close()
