"""A Redis outage in the log: said once when it starts and once when it ends, per
process, however many loops retry meanwhile (a worker logged one WARNING per retry:
21 lines in 6 s; `worker/redis/_outage.py`)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from test_faults import ASKQ, Procs, environ, procs, server

from askq.redis._outage import Outage
from bench._redis_server import RedisServer

__all__ = ["procs", "server"]  # the fixtures, used by name

OUT = "Redis is out of reach"
BACK = "Redis reconnected after"


def warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("WARNING")]


@pytest.mark.real
async def test_a_redis_outage_is_logged_once_and_its_end_once(
    server: RedisServer, procs: Procs
) -> None:
    """redis-server is SIGKILLed under a running `askq worker` and `askq sweeper` for
    6 s, then started again: each process logs one WARNING as the outage starts (what
    failed first, and why) and one as it ends, with how long it lasted; nothing per
    retry in between. Then both work again: an ask is answered."""
    worker = procs.start("worker", [*ASKQ, "worker", "auto", "--consumer", "w1"], environ(server))
    await worker.wait_for("ready")
    sweeper = await procs.sweeper(server, "sweeper")
    server.kill9()
    await asyncio.sleep(6.0)
    server.start()
    for proc in (worker, sweeper):
        await proc.wait_for(BACK, 20)
    await asyncio.sleep(1.0)  # anything a slower loop would still say
    for proc in (worker, sweeper):
        lines = warnings(proc.err())
        assert [line for line in lines if OUT in line] == lines[:1], proc.err()
        assert len([line for line in lines if BACK in line]) == 1, proc.err()
        assert len(lines) == 2, proc.err()  # nothing per retry
        seconds = float(lines[1].split(BACK)[1].split()[0])
        assert 5.0 < seconds < 20.0, lines[1]
    asked = procs.ask(server, "cli", "--agent", "a", "--turn", "t")
    assert await asked.exited(30) == 0, asked.err()


def test_outage_says_it_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    """The tries in between are DEBUG; a second outage is a new pair of lines."""
    outage = Outage()
    with caplog.at_level(logging.DEBUG, logger="askq.redis"):
        outage.reached()  # nothing was wrong: nothing said
        for loop in ("offers", "heartbeat", "offers", "an ask"):
            outage.failed(loop, ConnectionError("Error 111 connecting to 127.0.0.1:1"))
        outage.reached()
        outage.reached()
        outage.failed("events", TimeoutError())
        outage.reached()
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    levels = ["WARNING", "DEBUG", "DEBUG", "DEBUG", "WARNING", "WARNING", "WARNING"]
    assert [level for level, _ in said] == levels
    assert said[0][1] == (
        "Redis is out of reach (offers: Error 111 connecting to 127.0.0.1:1);"
        " trying again until it is back"
    )
    assert said[4][1].startswith(BACK) and "(4 failed tries meanwhile)" in said[4][1]
    assert said[5][1] == f"{OUT} (events: TimeoutError); trying again until it is back"
    assert "(1 failed try meanwhile)" in said[6][1]
    assert outage.outages == 2 and not outage.down


async def test_a_sweeper_starting_in_an_outage_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sweeper's start checks ASKQ_SHARDS; with Redis out of reach it skips the check
    and says so as the outage's first line, not as a warning of its own beside it (the
    log had both: the outage test failed on it whenever the check lost the race with the
    kill)."""
    from askq import Settings
    from askq.redis._outage import outage
    from askq.sweeping._sweeper import _shutdown, _startup
    from bench._redis_server import free_port

    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    ctx: dict[str, object] = {"askq_settings": settings}
    assert not outage.down
    try:
        with caplog.at_level(logging.WARNING):
            await _startup(ctx)
            await asyncio.sleep(0.5)  # the sweeper's loops fail meanwhile: one outage
    finally:
        await _shutdown(ctx)
        outage.since, outage.failures = None, 0  # the process's tracker, for the next test
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, said
    assert said[0].startswith(f"{OUT} (the ASKQ_SHARDS check at start, skipped: ")
    assert "REDIS_UNAVAILABLE" in said[0]
