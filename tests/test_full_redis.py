"""A full Redis (issue 22, item 13): `maxmemory` reached under `noeviction`, on a private
`redis-server` each test starts on a free loopback port (the shared server's config is
never touched).

- An ask gets REDIS_UNAVAILABLE saying Redis is full (the tool and `askq ask` too: exit
  11), never a raw OutOfMemoryError or INTERNAL, and nothing half-written: a refused
  transition changes nothing, a script that crosses the limit inside completes whole.
- A worker and `askq sweeper` run through the whole episode (they stay up, their
  heartbeats hold: `askq health worker` passes, no live caller's ask is cancelled as
  "caller gone"), each says so once (one log line, the metrics), and once memory is
  freed a pending ask is answered and a new one is answered end to end, no restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import ROOT, SEED, YES, YES_JSON, running

from askq import AskError, AskUserQuestionTool, Caller, ErrorCode, Seam, Settings
from askq.answerers.memory import MemoryAnswerer
from bench._redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.real

PREFIX = "full"
ASKQ = [sys.executable, "-m", "askq"]
TIMING = {
    "consumer_ttl": 1.5,
    "agent_ttl": 1.5,
    "caller_ttl": 1.5,
    "block_seconds": 2.0,
    "sweep_interval": 1.0,
    "poll_delay": 0.1,
}
FILLER = "filler:"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if redis_server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not on PATH; CI must run the full-Redis tests")
        pytest.skip("redis-server is not on PATH (the full-Redis tests start their own)")
    srv = RedisServer(tmp_path / "redis").start()  # noeviction
    try:
        client = redis.Redis(host="127.0.0.1", port=srv.port)
        client.config_set("maxmemory", MAXMEMORY)  # this test's own server
        client.close()
        yield srv
    finally:
        srv.stop()


MAXMEMORY = 32 * 1024 * 1024


def fill(server: RedisServer) -> int:
    """Write filler keys until Redis refuses one for lack of memory, then set maxmemory
    a little below what it uses, so it stays full (right at the limit, what a
    command's buffers free may let the next write through); how many keys it took."""
    client = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        n = 0
        while True:
            try:
                client.set(f"{FILLER}{n}", "x" * 65536)
            except redis.exceptions.OutOfMemoryError:
                break
            n += 1
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", used - 2 * 1024 * 1024)  # (buffers come and go)
        return n
    finally:
        client.close()


def free(server: RedisServer) -> None:
    """Delete the filler (and put maxmemory back where it was)."""
    client = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        keys = list(client.scan_iter(f"{FILLER}*", count=1000))
        if keys:
            client.delete(*keys)
        client.config_set("maxmemory", MAXMEMORY)
    finally:
        client.close()


def settings(server: RedisServer, **overrides: Any) -> Settings:
    return Settings(redis_url=server.url, **{"prefix": PREFIX, **TIMING, **overrides})


def environ(server: RedisServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKQ_")}
    env.update(ASKQ_REDIS_URL=server.url, ASKQ_PREFIX=PREFIX, PYTHONPATH=str(ROOT))
    env.update({f"ASKQ_{k.upper()}": str(v) for k, v in TIMING.items()})
    return env


def is_full_error(exc: AskError) -> bool:
    return exc.code is ErrorCode.REDIS_UNAVAILABLE and "is full" in exc.message


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.1)


# --- what a refused transition leaves -------------------------------------------------

# Keys the processes' heartbeats and blocking reads keep writing (liveness, not state).
LIVENESS = re.compile(r":(live|consumers|beats|alive|agent|sweepers|callers)(:|$)")


def state(server: RedisServer) -> dict[str, Any]:
    """Every key of the deployment but liveness, by value (a stream: its entries and
    each group's pending count and last id; not its consumers' seen times)."""
    client = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
    out: dict[str, Any] = {}
    try:
        for key in sorted(client.scan_iter("{" + PREFIX + "*", count=1000)):
            if LIVENESS.search(key):
                continue
            kind = client.type(key)
            if kind == "string":
                out[key] = client.get(key)
            elif kind == "hash":
                out[key] = client.hgetall(key)
            elif kind == "zset":
                out[key] = client.zrange(key, 0, -1, withscores=True)
            elif kind == "set":
                out[key] = sorted(client.smembers(key))
            elif kind == "list":
                out[key] = client.lrange(key, 0, -1)
            elif kind == "stream":
                groups = [
                    (g["name"], g["pending"], g["last-delivered-id"])
                    for g in client.xinfo_groups(key)
                ]
                out[key] = (client.xrange(key), groups)
    finally:
        client.close()
    return out


async def all_or_nothing(
    server: RedisServer, name: str, step: Awaitable[Any], done: list[str], refused: list[str]
) -> Any:
    """Run one transition while Redis is full: refused (REDIS_UNAVAILABLE, saying so)
    with nothing changed, or done whole."""
    before = state(server)
    try:
        result = await step
    except AskError as exc:
        assert is_full_error(exc), (name, exc)
        assert state(server) == before, f"{name}: refused, but it changed Redis"
        refused.append(name)
        return None
    done.append(name)
    return result


async def test_full_redis_refuses_whole_and_says_so(server: RedisServer) -> None:
    human = MemoryAnswerer()
    async with Seam(settings=settings(server)) as seam, running(seam, human, "desk"):
        pending = [
            asyncio.ensure_future(seam.ask(SEED, Caller(agent_id="a", turn_id=f"t{i}")))
            for i in range(4)
        ]
        ids = [(await human.next_presented(10)).request_id for _ in pending]
        assert fill(server) > 0
        done: list[str] = []
        refused: list[str] = []
        # A new ask: refused whole, with the clear code (from the seam and the tool).
        ask = seam.ask(SEED, Caller(agent_id="a", turn_id="new"))
        await all_or_nothing(server, "ask", ask, done, refused)
        assert refused == ["ask"]
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, Caller(agent_id="a", turn_id="new"))
        assert is_full_error(err.value), err.value
        assert "nothing was written" in err.value.message and "maxmemory" in err.value.message
        result = await AskUserQuestionTool(seam).execute(SEED, Caller(agent_id="a", turn_id="n2"))
        assert result.code is ErrorCode.REDIS_UNAVAILABLE and "is full" in result.content
        # Every other transition: refused with nothing changed, or done whole.
        await all_or_nothing(server, "answer", human.answer(ids[0], YES), done, refused)
        await all_or_nothing(
            server,
            "cancel",
            seam.cancel(ids[1], ErrorCode.ABORTED, "m", by="test"),
            done,
            refused,
        )
        await all_or_nothing(server, "abort_turn", seam.abort_turn("t2"), done, refused)
        await all_or_nothing(server, "release", seam.release(ids[3], "desk"), done, refused)
        await all_or_nothing(server, "fire", seam.fire(f"timeout|{ids[3]}"), done, refused)
        # (Redis 7.0: answer, cancel and fire first make a write that adds nothing, so
        # Redis lets them through whole; ask, abort_turn and release are refused whole.)
        print(f"under a full Redis: refused whole {refused}; done whole {done}")
        free(server)
        # Nothing was lost: what was refused goes through now.
        if "answer" in refused:
            await human.answer(ids[0], YES)
        assert (await asyncio.wait_for(pending[0], 10)).to_json() == YES_JSON
        assert await seam.release(ids[3], "desk") or "fire" in done
        for task in pending[1:]:
            task.cancel()
        await asyncio.gather(*pending[1:], return_exceptions=True)


async def test_a_script_that_crosses_the_limit_inside_completes_whole(
    server: RedisServer,
) -> None:
    """Redis checks the limit as a script starts (its command's arguments counted): one
    that starts under it and crosses it while writing runs to the end. The limit is
    raised step by step above what Redis uses, an ask each time: every ask refused
    leaves nothing; the first one let in (its arguments fit, its writes, the payload
    twice, do not) is written whole and leaves Redis full."""
    human = MemoryAnswerer()
    big = {
        "questions": [
            {
                "id": f"q{i}",
                "question": "x" * 2000,
                "header": "Big",
                "options": [{"label": f"o{j}", "description": "d" * 500} for j in range(10)],
            }
            for i in range(8)
        ]
    }
    async with Seam(settings=settings(server)) as seam, running(seam, human, "desk"):
        client = redis.Redis(host="127.0.0.1", port=server.port)
        for headroom in range(32_000, 400_000, 8_000):
            # (what Redis uses now: the connections' buffers of earlier tries count)
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", used + headroom)
            ask = asyncio.ensure_future(seam.ask(big, Caller(agent_id="a", turn_id="t")))

            async def settled_or_written(ask: asyncio.Future[Any] = ask) -> bool:
                return ask.done() or bool(await seam.pending_ids())

            await eventually(settled_or_written, 10, "the ask refused or written")
            if not ask.done():
                break
            assert is_full_error(ask.exception()), ask.exception()  # type: ignore[arg-type]
            assert not await seam.pending_ids()
        else:
            raise AssertionError("no ask got in")
        (request_id,) = await seam.pending_ids()
        with pytest.raises(redis.exceptions.OutOfMemoryError):  # it crossed the limit inside
            client.set("one-more", "x")
        # Whole: the request, its payload, its offer on the tier's stream.
        status = await seam.request_status(request_id)
        assert status is not None and status.state == "OFFERED", status
        info = await seam.request_info(request_id)
        assert len(info.request.questions) == 8
        assert await seam.redis.xlen(seam.keys.tier(0)) == 1
        # The group's accept was refused (Redis is full now): handled once it is not.
        client.config_set("maxmemory", MAXMEMORY)
        client.close()
        offer = await human.next_presented(15)
        assert offer.request_id == request_id
        answers = [{"id": f"q{i}", "selected": ["o1"]} for i in range(8)]
        await human.answer(offer.request_id, answers)
        assert len((await asyncio.wait_for(ask, 10)).answers) == 8


# --- processes through a full episode ----------------------------------------------------


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.path = logs / f"{name}.err"
        self._err = self.path.open("w")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=self._err, env=env, cwd=ROOT
        )

    def err(self) -> str:
        return self.path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.err():
            assert self.alive(), f"{self.name} exited {self.proc.returncode}:\n{self.err()}"
            assert time.monotonic() < deadline, f"{self.name}: no {text!r}:\n{self.err()}"
            await asyncio.sleep(0.05)
        return self.err()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._err.close()


@asynccontextmanager
async def started(
    server: RedisServer, logs: Path, name: str, *args: str
) -> AsyncIterator[tuple[Proc, int]]:
    proc = Proc(name, [*ASKQ, *args, "--metrics-port", "0"], environ(server), logs)
    try:
        text = await proc.wait_for("ready")
        found = re.search(r"metrics on \S*?:(\d+)", text)  # (":9464" or a URL)
        assert found, text
        yield proc, int(found.group(1))
    finally:
        proc.stop()


def metric(port: int, name: str) -> float:
    """The sum of a metric's samples at a process's metrics endpoint."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith(name) and (line[len(name)] in " {")
    ]
    return sum(values)


def askq(server: RedisServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASKQ, *args], input=stdin, capture_output=True, text=True, timeout=60, env=environ(server)
    )


async def test_worker_and_sweeper_ride_out_a_full_redis(
    server: RedisServer, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    human = MemoryAnswerer()
    scope = {"kind": "human"}
    async with (
        started(server, logs, "worker", "worker", "auto", "--scope", "kind=auto") as (
            worker,
            wport,
        ),
        started(server, logs, "sweeper", "sweeper") as (sweeper, sport),
        Seam(settings=settings(server)) as seam,
        running(seam, human, "humans", scope=scope),
    ):
        auto = {"kind": "auto"}
        first = await seam.ask(SEED, Caller(agent_id="a", turn_id="t0"), scope=auto)
        assert first.to_json() == YES_JSON
        # A human's question pending through the whole episode, its caller alive.
        waiting = asyncio.ensure_future(
            seam.ask(SEED, Caller(agent_id="a", turn_id="t1"), scope=scope)
        )
        offer = await human.next_presented(10)

        assert fill(server) > 0
        started_full = time.monotonic()
        with pytest.raises(AskError) as err:
            await seam.ask(SEED, Caller(agent_id="a", turn_id="t2"), scope=auto)
        assert is_full_error(err.value), err.value
        cli = askq(server, "ask", "-q", "Go on?", "-o", "Yes", "-o", "No", "--scope", "kind=auto")
        assert cli.returncode == 11, cli.stderr
        assert cli.stderr.startswith("REDIS_UNAVAILABLE: Redis at ") and "is full" in cli.stderr

        # Full for several TTLs (1.5 s), sweeps (1 s) and arq polls: everyone stays up.
        while time.monotonic() - started_full < 8:
            assert worker.alive(), worker.err()
            assert sweeper.alive(), sweeper.err()
            await asyncio.sleep(0.5)
        health = askq(server, "health", "worker", "--group", "auto")
        assert health.returncode == 0, health.stderr  # its heartbeat held
        for port in (wport, sport):
            assert metric(port, "askq_redis_full") == 1
            assert metric(port, "askq_redis_full_refusals_total") >= 1
        assert 0 < metric(sport, "askq_redis_maxmemory_bytes") < MAXMEMORY
        assert not waiting.done()  # not cancelled as "caller gone"

        free(server)
        # Answered now, with no restart: the pending question and a new ask.
        await human.answer(offer.request_id, YES)
        assert (await asyncio.wait_for(waiting, 10)).to_json() == YES_JSON
        new = seam.ask(SEED, Caller(agent_id="a", turn_id=uuid.uuid4().hex), scope=auto)
        assert (await asyncio.wait_for(new, 10)).to_json() == YES_JSON
        cli = askq(server, "ask", "-q", "Go on?", "-o", "Yes", "-o", "No", "--scope", "kind=auto")
        assert cli.returncode == 0 and json.loads(cli.stdout)["answers"][0]["selected"] == ["Yes"]

        for proc, port in ((worker, wport), (sweeper, sport)):
            await proc.wait_for("Redis takes writes again", 15)
            text = proc.err()
            assert text.count("Redis is full") == 1, text  # once an episode, not per retry
            assert "Traceback" not in text and "INTERNAL" not in text, text
            assert metric(port, "askq_redis_full") == 0
        assert worker.alive() and sweeper.alive()


# --- the loops, without a server --------------------------------------------------------


OOM = "command not allowed when used memory > 'maxmemory'."


class _FullThenRunning:
    """An arq worker whose writes Redis refuses (full) `refusals` times, then runs."""


    starts = 0

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.main_task = None

    async def async_run(self) -> None:
        _FullThenRunning.starts += 1
        if _FullThenRunning.starts <= self.refusals:
            raise redis.exceptions.ResponseError(
                f"Command # 1 (PSETEX arq:job:x 1000 {{}}) of pipeline caused error: ({OOM!r},)"
            )
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None


async def test_arq_queues_and_heartbeats_keep_going_and_say_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from askq.redis._arq import run_supervised
    from askq.redis._full import episode
    from askq.redis._heartbeat import keep_beating

    episode.__init__()  # type: ignore[misc]  # (what an earlier test in this process saw)
    caplog.set_level("WARNING")
    _FullThenRunning.starts = 0
    queue = asyncio.ensure_future(
        run_supervised("sends", lambda: _FullThenRunning(3))  # type: ignore[arg-type, return-value]
    )
    beats = 0
    refused_beats: list[int] = []

    async def beat() -> None:
        # Refused until the queue got going again (one episode for both), and 5 times.
        nonlocal beats
        beats += 1
        if beats <= 5 or _FullThenRunning.starts <= 3:
            refused_beats.append(beats)
            raise redis.exceptions.OutOfMemoryError(OOM)
        episode.wrote()  # (as a beat that wrote says)

    beating = asyncio.ensure_future(keep_beating("replica r1 of g", beat, 0.05))
    await eventually(lambda: _true(_FullThenRunning.starts > 3 and beats > 5), 10, "going on")
    await eventually(lambda: _true(not episode.active), 10, "the episode over")
    assert not queue.done() and not beating.done()
    queue.cancel()
    beating.cancel()
    await asyncio.gather(queue, beating, return_exceptions=True)
    full = [r for r in caplog.records if "Redis is full" in r.getMessage()]
    again = [r for r in caplog.records if "Redis takes writes again" in r.getMessage()]
    assert len(full) == 1 and len(again) == 1, [r.getMessage() for r in caplog.records]
    refused = 3 + len(refused_beats)  # the queue's and the beats
    assert f"{refused} write(s) refused" in again[0].getMessage(), again[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)  # no traceback


async def _true(value: bool) -> bool:
    return value
