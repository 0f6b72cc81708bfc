"""Fault injection against real Redis servers these tests start themselves.

Each test starts its own `redis-server` (AOF on, `appendfsync everysec`) on a free
loopback port, runs askq processes against it (answerer replicas, `askq ask` callers,
`askq sweeper`s), breaks something — SIGKILL of a worker, of a caller, of Redis
itself; `CLIENT KILL` of a blocked connection; two sweepers on the same deadlines; a
channel whose every send fails — and checks the invariants:

- no request is lost: every ask has exactly one outcome, and its caller (if alive)
  gets it;
- none is settled twice: the events stream holds exactly one settlement per request;
- answerers retract what was cancelled.

Without `redis-server` on PATH they are skipped, except under CI, where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import ROOT, SEED, YES, YES_JSON, running

from askq import AskError, Caller, ErrorCode, Seam, Settings
from askq.answerers.memory import MemoryAnswerer
from bench._redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.real

PREFIX = "f"
TERMINAL = {"ANSWERED", "FAILED", "CANCELLED"}
ASKQ = [sys.executable, "-m", "askq"]
FAULT_WORKER = [sys.executable, str(ROOT / "tests" / "fault_worker.py")]
FAULT_CALLER = [sys.executable, str(ROOT / "tests" / "fault_caller.py")]

# Short timings, so that deaths are noticed and recovered in seconds.
TIMING = {
    "consumer_ttl": 1.5,
    "agent_ttl": 1.5,
    "caller_ttl": 1.0,
    "block_seconds": 2.0,
    "socket_timeout": 2.0,
    "sweep_interval": 1.0,
    "poll_delay": 0.1,
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if redis_server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not on PATH; CI must run the fault-injection tests")
        pytest.skip("redis-server is not on PATH (the fault-injection tests start their own)")
    srv = RedisServer(tmp_path / "redis", aof=True).start()
    try:
        yield srv
    finally:
        srv.stop()


def environ(server: RedisServer, **overrides: float | str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKQ_")}
    env.update(ASKQ_REDIS_URL=server.url, ASKQ_PREFIX=PREFIX, PYTHONPATH=str(ROOT))
    env.update({f"ASKQ_{k.upper()}": str(v) for k, v in {**TIMING, **overrides}.items()})
    return env


def settings(server: RedisServer, **overrides: Any) -> Settings:
    return Settings(redis_url=server.url, **{"prefix": PREFIX, **TIMING, **overrides})


class Proc:
    """A child process whose stderr (and stdout) go to files in the test's directory."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.err_path = logs / f"{name}.err"
        self.out_path = logs / f"{name}.out"
        self._err = self.err_path.open("w")
        self._out = self.out_path.open("w")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=self._out, stderr=self._err, env=env, cwd=ROOT
        )

    def feed(self, text: str) -> Proc:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.close()
        return self

    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    def lines(self, word: str) -> list[list[str]]:
        """The stderr lines that start with `word`, split."""
        return [line.split() for line in self.err().splitlines() if line.split()[:1] == [word]]

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.err():
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.err()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {text!r} within {timeout} s:\n{self.err()}")
            await asyncio.sleep(0.05)

    async def exited(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} still running after {timeout} s:\n{self.err()}")
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        for f in (self._err, self._out, self.proc.stdin):
            if f is not None and not f.closed:
                f.close()


class Procs:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.all: list[Proc] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        proc = Proc(name, argv, env, self.logs)
        self.all.append(proc)
        return proc

    async def worker(self, server: RedisServer, name: str, *args: str, **env: Any) -> Proc:
        proc = self.start(name, [*FAULT_WORKER, "--consumer", name, *args], environ(server, **env))
        await proc.wait_for("ready")
        return proc

    async def sweeper(self, server: RedisServer, name: str, **env: Any) -> Proc:
        proc = self.start(name, [*ASKQ, "sweeper"], environ(server, **env))
        await proc.wait_for("askq sweeper: ready")
        return proc

    def ask(self, server: RedisServer, name: str, *args: str, **env: Any) -> Proc:
        proc = self.start(name, [*ASKQ, "ask", *args], environ(server, **env))
        return proc.feed(json.dumps(SEED))


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    logs = tmp_path / "logs"
    logs.mkdir()
    group = Procs(logs)
    try:
        yield group
    finally:
        for proc in reversed(group.all):
            proc.stop()


@asynccontextmanager
async def seam_on(server: RedisServer, **overrides: Any) -> AsyncIterator[Seam]:
    async with Seam(settings=settings(server, **overrides)) as seam:
        yield seam


async def eventually(check: Callable[[], Any], timeout: float = 20, what: str = "") -> Any:
    """Poll `check` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what or check}")
        await asyncio.sleep(0.05)


# A trail's settlement entry -> the state it settled in (lua/common.lua, settled_event).
SETTLED_STATE = {
    "answered": "ANSWERED",
    "defaulted": "ANSWERED",
    "timed_out": "CANCELLED",
    "cancelled": "CANCELLED",
    "failed": "FAILED",
}


async def events_by_request(seam: Seam, ids: list[str]) -> dict[str, Counter[str]]:
    """request id -> how many events of each state it had: its settlements from its
    audit trail (a settlement with no claim held sends no event: nobody shows it), the
    rest (OFFERED, REMIND, ESCALATED) from the events stream."""
    out: dict[str, Counter[str]] = {}
    for _, fields in await seam.redis.xrange(seam.keys.events):
        if fields["state"] not in TERMINAL:
            out.setdefault(fields["request"], Counter())[fields["state"]] += 1
    for request_id in ids:
        trail = await seam.redis.lrange(seam.keys.audit(request_id), 0, -1)
        for line in trail:
            state = SETTLED_STATE.get(json.loads(line)["e"])
            if state is not None:
                out.setdefault(request_id, Counter())[state] += 1
    return out


def settlements(events: dict[str, Counter[str]], request_id: str) -> int:
    return sum(n for state, n in events.get(request_id, Counter()).items() if state in TERMINAL)


async def assert_settled_once(seam: Seam, ids: list[str]) -> dict[str, Counter[str]]:
    """Every request settled (reply written, state terminal), exactly one settlement
    in its trail each, and nothing left pending."""
    events = await events_by_request(seam, ids)
    twice = {i: settlements(events, i) for i in ids if settlements(events, i) != 1}
    assert not twice, f"settlement events per request, expected 1: {twice}"
    for request_id in ids:
        assert await seam.settlement(request_id) is not None, f"{request_id}: no reply"
    assert await seam.redis.zcard(seam.keys.pending) == 0
    return events


def presented(proc: Proc) -> list[str]:
    return [line[1] for line in proc.lines("presented")]


def retracted(proc: Proc) -> dict[str, list[str]]:
    return {line[1]: line[2:] for line in proc.lines("retracted")}


async def claimed_by(seam: Seam, request_id: str, group: str) -> bool:
    status = await seam.request_status(request_id)
    return status is not None and status.state == "CLAIMED" and status.claimers == [group]


# --- a worker killed between claim and answer ------------------------------------------


async def test_worker_killed_between_claim_and_answer(server: RedisServer, procs: Procs) -> None:
    """Replica w1 claims five asks and is SIGKILLed before answering any. While no
    replica is alive one turn is aborted. Replica w2 (same group) takes over the other
    four, presents each once and answers each once; a turn aborted while w2 shows its
    question is retracted there, and w2's late answer to it is refused."""
    n = 5
    w1 = await procs.worker(server, "w1", "--group", "humans", "--mode", "hold")
    async with seam_on(server) as seam:
        asks = [
            asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id=f"t{i}")))
            for i in range(n)
        ]
        ids = await eventually(lambda: len(presented(w1)) == n and presented(w1), what="claims")
        turns = {(await seam.request_status(i)).turn: i for i in ids}  # type: ignore[union-attr]
        for request_id in ids:
            assert await claimed_by(seam, request_id, "humans")
        w1.kill9()  # between claim and answer

        await seam.abort_turn("t0")  # withdrawn while the group has no live replica
        w2 = await procs.worker(
            server, "w2", "--group", "humans", "--mode", "answer", "--delay", "1.0"
        )
        await eventually(lambda: turns["t1"] in presented(w2), what="t1 recovered by w2")
        await seam.abort_turn("t1")  # withdrawn while w2 shows it
        results = await asyncio.wait_for(asyncio.gather(*asks, return_exceptions=True), 20)

        for i, result in enumerate(results):
            if i < 2:
                assert isinstance(result, AskError) and result.code == ErrorCode.ABORTED
            else:
                assert not isinstance(result, BaseException), result
                assert result.to_json() == YES_JSON
        live = [turns[f"t{i}"] for i in range(2, n)]
        await eventually(lambda: len(w2.lines("refused")) == 1, what="late answer refused")
        # w2 logs an answer once its script returns, which may be after the caller's
        # ask already has (the reply is pushed by that script).
        await eventually(lambda: len(w2.lines("answered")) >= len(live), what="answers logged")
        assert sorted(presented(w2)) == sorted([turns["t1"], *live])  # each once, t0 never
        assert sorted(line[1] for line in w2.lines("answered")) == sorted(live)
        assert w2.lines("refused") == [["refused", turns["t1"], "ALREADY_SETTLED"]]
        assert retracted(w2) == {turns["t1"]: ["CANCELLED", "ABORTED", "abort"]}
        await assert_settled_once(seam, ids)
        for request_id in live:
            settled = await seam.settlement(request_id)
            assert settled is not None and settled.by == "fault:humans"


# --- a caller killed while it waits -----------------------------------------------------


async def test_caller_killed_while_waiting(server: RedisServer, procs: Procs) -> None:
    """Two `askq ask` processes wait on a held question each; one is SIGKILLed. Once its
    heartbeat lapses (ASKQ_CALLER_TTL=1) the sweeper cancels its ask ("caller gone")
    and the answerer retracts it; the other caller is left alone and gets its answer."""
    worker = await procs.worker(server, "w1", "--group", "humans", "--mode", "hold")
    await procs.sweeper(server, "sweeper")
    victim = procs.ask(server, "victim", "--turn", "victim")
    survivor = procs.ask(server, "survivor", "--turn", "survivor")
    async with seam_on(server) as seam:
        ids = await eventually(lambda: len(presented(worker)) == 2 and presented(worker))
        turns = {(await seam.request_status(i)).turn: i for i in ids}  # type: ignore[union-attr]
        victim.kill9()
        killed = time.monotonic()
        gone = turns["victim"]
        await eventually(lambda: gone in retracted(worker), 15, "victim's ask retracted")
        took = time.monotonic() - killed
        assert retracted(worker)[gone] == ["CANCELLED", "ABORTED", "caller_gone"]
        settled = await seam.settlement(gone)
        assert settled is not None and (settled.state, settled.by) == ("CANCELLED", "caller gone")
        assert took < 8, f"cancelled {took:.1f} s after the caller died"

        kept = turns["survivor"]
        await asyncio.sleep(1.5)  # more than the caller TTL: only its heartbeat keeps it
        assert survivor.alive() and await claimed_by(seam, kept, "humans")
        await seam.answer(kept, "humans", YES, by="test:human")
        assert await survivor.exited(15) == 0
        assert survivor.out() == YES_JSON + "\n"
        await eventually(lambda: kept in retracted(worker), 5, "answered elsewhere")
        assert retracted(worker)[kept][0] == "ANSWERED"
        await assert_settled_once(seam, ids)
        assert len(presented(worker)) == 2


# --- Redis SIGKILLed and restarted under load ---------------------------------------------


class AckedWrites(threading.Thread):
    """INCRs a counter as fast as it can and remembers the last value Redis
    acknowledged, until Redis goes away."""

    def __init__(self, server: RedisServer) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)
        self.acked = 0

    def run(self) -> None:
        try:
            while True:
                self.acked = int(self.client.incr("acked-writes"))
        except redis.RedisError:
            return
        finally:
            self.client.close()


async def test_redis_killed_and_restarted_under_load(
    server: RedisServer, procs: Procs, tmp_path: Path
) -> None:
    """A caller process with 150 asks in flight (idempotency keys), two answering
    replicas and a sweeper; redis-server is SIGKILLed mid-way and restarted on the same
    port and directory (AOF, everysec). Every process reconnects by itself; every ask
    gets exactly one outcome, every request is settled exactly once, and every write
    Redis acknowledged before the kill is there after the restart."""
    n = 150
    env = {"consumer_ttl": 5.0}  # the group stays live across the restart
    workers = [
        await procs.worker(
            server, f"w{i}", "--group", "humans", "--mode", "answer", "--delay", "0.3", **env
        )
        for i in (1, 2)
    ]
    await procs.sweeper(server, "sweeper", **env)  # maintenance runs through the restart
    caller = procs.start(
        "caller",
        [*FAULT_CALLER, "-n", str(n), "--spread", "3", "--key-prefix", "load"],
        environ(server, **env),
    )
    writes = AckedWrites(server)
    writes.start()

    def shown() -> int:
        return sum(len(presented(w)) for w in workers)

    await eventually(lambda: shown() >= n // 3, 30, "load in flight")
    server.kill9()
    killed = time.monotonic()
    writes.join(5)
    await asyncio.sleep(0.5)
    server.start()
    restarted = time.monotonic()
    client = server.client()
    try:
        recovered = int(client.get("acked-writes") or 0)
    finally:
        client.close()
    assert recovered >= writes.acked > 0, (recovered, writes.acked)

    assert await caller.exited(60) == 0, caller.err()
    outcomes = [json.loads(line) for line in caller.out().splitlines()]
    assert sorted(o["i"] for o in outcomes) == list(range(n))  # one outcome each
    assert {o["outcome"] for o in outcomes} == {"ANSWERED"}
    assert {o["answers"] for o in outcomes} == {YES_JSON}
    across = [o for o in outcomes if o["started"] < killed and o["ended"] > restarted]
    blocked = [o for o in across if o["retries"] == 0]
    assert blocked, "no ask was blocked across the restart"

    async with seam_on(server) as seam:
        found = [await seam.idempotent_request(o["key"]) for o in outcomes]
        ids = [request_id for request_id in found if request_id is not None]
        assert len(ids) == n, "an idempotency key lost its request"
        events = await assert_settled_once(seam, ids)
        assert {state for i in ids for state in events[i] if state in TERMINAL} == {"ANSWERED"}
        answered = Counter(line[1] for w in workers for line in w.lines("answered"))
        assert max(answered.values()) == 1  # no answer accepted twice
    for proc in workers:  # the sweeper's own test: test_sweeper_survives_redis_restart
        assert proc.alive(), f"{proc.name} died across the restart:\n{proc.err()[-3000:]}"
    print(
        f"redis down {restarted - killed:.2f} s; {len(across)} asks spanned it,"
        f" {len(blocked)} blocked across it, {sum(o['retries'] > 0 for o in outcomes)}"
        f" re-asked; acked writes {writes.acked}, after restart {recovered}"
    )


async def test_sweeper_survives_redis_restart(server: RedisServer, procs: Procs) -> None:
    """`askq sweeper` reconnects by itself: after redis-server is SIGKILLed and
    restarted, a deadline that falls due afterwards still fires."""
    sweeper = await procs.sweeper(server, "sweeper")
    server.kill9()
    await asyncio.sleep(1.5)  # several arq polls and a maintenance round while it is down
    server.start()
    await asyncio.sleep(1.0)
    assert sweeper.alive(), f"askq sweeper exited {sweeper.proc.returncode}:\n{sweeper.err()}"
    async with seam_on(server) as seam:
        human = MemoryAnswerer()
        async with running(seam, human, "desk", escalate_after=0.5):
            with pytest.raises(AskError) as err:
                await asyncio.wait_for(seam.ask(SEED, Caller(agent_id="a", turn_id="t")), 10)
    assert err.value.code == ErrorCode.NO_ANSWERER  # escalated by the sweeper, then nobody


async def test_sending_worker_survives_redis_restart(server: RedisServer, procs: Procs) -> None:
    """A replica whose channel uses retried sends (`uses_sends`: Slack, email) runs an
    arq worker for its send queue; after redis-server is SIGKILLed and restarted, the
    replica is still running and its group is live again."""
    worker = await procs.worker(server, "w1", "--group", "slack", "--mode", "failsend")
    server.kill9()
    await asyncio.sleep(1.5)
    server.start()
    await asyncio.sleep(1.0)
    assert worker.alive(), f"the replica exited {worker.proc.returncode}:\n{worker.err()}"


# --- two sweepers on the same deadlines -------------------------------------------------


async def test_two_sweepers_fire_each_deadline_once(server: RedisServer, procs: Procs) -> None:
    """Two `askq sweeper` processes, both blocked on the timers; 60 claims with a
    reminder (0.8 s) and an escalation deadline (1.5 s) each, due at nearly the same
    moments. Each reminder and each escalation fires exactly once (counted in the
    events stream), each request settles once (NO_ANSWERER: no tier after), and the
    group retracts each escalated question."""
    n = 60
    await procs.sweeper(server, "sweeper-1")
    await procs.sweeper(server, "sweeper-2")
    async with seam_on(server) as seam:

        async def blocked_sweepers() -> bool:
            clients = await seam.redis.client_list()
            return sum(c["cmd"] == "blpop" for c in clients) == 2

        await eventually(blocked_sweepers, 10, "both sweepers waiting on the timers")
        human = MemoryAnswerer()
        async with running(seam, human, "desk", remind_after=0.8, escalate_after=1.5):
            asks = [
                asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id=f"t{i}")))
                for i in range(n)
            ]
            ids = [(await human.next_presented()).request_id for _ in range(n)]
            results = await asyncio.wait_for(asyncio.gather(*asks, return_exceptions=True), 20)
            retractions = [await human.next_retracted() for _ in range(n)]
        assert all(isinstance(r, AskError) and r.code == ErrorCode.NO_ANSWERER for r in results)
        events = await assert_settled_once(seam, ids)
        for request_id in ids:
            assert events[request_id]["REMIND"] == 1, events[request_id]
            assert events[request_id]["ESCALATED"] == 1, events[request_id]
        assert sorted(r.request_id for r in retractions) == sorted(ids)
        assert await seam.redis.zcard(seam.keys.timers) == 0


# --- CLIENT KILL of a blocked caller's connection ------------------------------------------


async def test_client_kill_of_a_blocked_caller(server: RedisServer, procs: Procs) -> None:
    """The connection an `askq ask` process waits on (BLMPOP on its inbox) is killed
    with CLIENT KILL: it reconnects. Killed again, this time with the answer landing
    while it reconnects, it still prints exactly its one answer."""
    human = MemoryAnswerer()
    async with seam_on(server) as seam, running(seam, human, "desk"):
        caller = procs.ask(server, "caller")
        offer = await human.next_presented(timeout=20)

        async def waiting() -> list[dict[str, Any]]:
            clients = await seam.redis.client_list()
            return [c for c in clients if c["cmd"] == "blmpop" and c["name"] != seam.client_name]

        [blocked] = await eventually(waiting, 10, "the caller blocked on its inbox")
        name = blocked["name"]
        assert name.startswith("askq-") and len(name) == len("askq-") + 12
        await seam.redis.execute_command("CLIENT", "KILL", "ID", blocked["id"])
        [again] = await eventually(waiting, 10, "the caller blocked again")
        assert again["name"] == name and again["id"] != blocked["id"]

        # Kill every connection of the caller's process, and answer at once.
        for client in await seam.redis.client_list():
            if client["name"] == name:
                await seam.redis.execute_command("CLIENT", "KILL", "ID", client["id"])
        await human.answer(offer.request_id, YES)
        assert await caller.exited(15) == 0, caller.err()
        assert caller.out() == YES_JSON + "\n"
        assert human.presented.empty()
        await assert_settled_once(seam, [offer.request_id])
        settled = await seam.settlement(offer.request_id)
        assert settled is not None and settled.by == "memory"


# --- a channel that raises on every send ---------------------------------------------------


async def test_channel_failing_every_send_falls_through(server: RedisServer, procs: Procs) -> None:
    """Tier 0's channel raises on every send: after its tries the claim is given back
    and the request falls through to tier 1 (`askq worker auto`), which answers."""
    slack = await procs.worker(server, "slack", "--group", "slack", "--mode", "failsend")
    auto = procs.start(
        "auto", [*ASKQ, "worker", "auto", "--group", "rules", "--priority", "10"], environ(server)
    )
    await auto.wait_for(": ready")
    caller = procs.ask(server, "caller")
    assert await caller.exited(30) == 0, caller.err()
    assert caller.out() == YES_JSON + "\n"
    [request_id] = presented(slack)
    assert [line[1] for line in slack.lines("sendfail")] == [request_id] * 2  # send_tries
    assert [line[1] for line in slack.lines("gaveup")] == [request_id]
    async with seam_on(server) as seam:
        events = await assert_settled_once(seam, [request_id])
        assert events[request_id]["OFFERED"] == 1  # fell through once, to tier 1
        settled = await seam.settlement(request_id)
        assert settled is not None and settled.by is not None and settled.by.startswith("auto:")


# --- two deployments (prefixes) on one Redis ------------------------------------------------


async def test_two_prefixes_on_one_redis_each_get_their_maintenance(server: RedisServer) -> None:
    """ASKQ_PREFIX exists so that several deployments can share a Redis. Each
    deployment's sweeper must run its own maintenance rounds (here: one at start-up and
    one a second, so 5 or 6 in 4.6 s), whatever the other deployment's sweeper does.
    Both run at the same wall-clock seconds, so rounds that collide are lost to one of
    them: arq's cron job ids and job keys (`arq:job:askq-sweep:<ms>`) are not under
    the prefix."""
    import dataclasses

    from arq.worker import Worker

    from askq.sweeping._sweeper import worker_settings

    rounds: Counter[str] = Counter()
    workers = []
    for prefix in ("tenant-a", "tenant-b"):
        options = worker_settings(settings(server, prefix=prefix, sweep_interval=1.0))
        [job] = options["cron_jobs"]

        async def counted(ctx: dict[str, Any], _job: Any = job.coroutine, _p: str = prefix) -> Any:
            rounds[_p] += 1
            return await _job(ctx)

        options["cron_jobs"] = [dataclasses.replace(job, coroutine=counted)]
        workers.append(Worker(**options, handle_signals=False))
    tasks = [asyncio.create_task(w.async_run()) for w in workers]
    try:
        await asyncio.sleep(4.6)
    finally:
        for w in workers:
            await w.close()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert rounds["tenant-a"] >= 4 and rounds["tenant-b"] >= 4, dict(rounds)
