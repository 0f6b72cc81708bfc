"""The soak: N asks through three tiers while answerer replicas are SIGKILLed and
restarted at random; then count what was lost, settled twice, or left in Redis.

    python -m bench.soak                 # 10,000 asks (about a minute or two)
    python -m bench.soak -n 300 --quick  # the CI run (seconds)

It starts its own `redis-server` on a free loopback port, two replicas of each tier's
group (`bench/_soak_worker.py`: tier 0 answers `route=rules` at once and declines the
rest; tier 1 declines `route=skip`, holds `route=hold`, answers the rest after 0-200 ms
or passes one in ten on; tier 2 answers everything) and two `askq sweeper`s. One
caller process (this one) keeps `--concurrency` asks in flight, each with its own turn
and idempotency key; some have a 1 s timeout on a held question (fail or default),
some have their turn aborted while they wait. A killer SIGKILLs a random replica (one
whose group has another replica up) every so often and restarts it after a moment,
half the time under the same consumer name (it re-reads its own pending offers), half
under a new one (its sibling takes the dead one's offers over); now and then it kills
and restarts a sweeper too.

Then, with ASKQ_SETTLED_TTL short, it waits for settled state to expire and counts the
keys left, by kind. Per-request and per-caller keys (`req`, `reply`, `turn`,
`aborted`, `inbox`, `asked`, `alive`, `agent`, and members left in `timers`) must all
be gone, but for reply keys kept as tombstones, each expiring within
`REPLY_MIN_TTL_S` (150 s) of its settlement, whatever the settled TTL. What stays is
the deployment's own: the group registry (`groups`, `groupinfo`, `live`,
`consumers:<group>`), the tier streams and their consumer groups,
the capped `events` stream (the run counts settlements from the audit stream, then
deletes it), the `callers` set (empty once its processes are forgotten),
the `timers:wake` list and the sweeper's arq queue keys.

Exit status 1 if anything was lost, settled twice, answered differently from its stored
settlement, or left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.crc import key_slot

from askq import AskError, Caller, ErrorCode, Seam, Settings, Settlement
from askq.observing._audit import SETTLED_EVENTS
from askq.redis._resend import REPLY_MIN_TTL_S

from . import _procs
from ._common import QUESTION, fmt_s, key_pattern
from ._redis_cluster import RedisCluster
from ._redis_server import RedisServer

PREFIX = "soak"
PER_REQUEST = {
    "req",
    "reply",
    "payload",
    "timeout",
    "idem",
    "turn",
    "aborted",
    "inbox",
    "asked",
    "alive",
    "agent",
}
REPLICAS = 2

# What an ask is (weights): where it goes and what it tests.
KINDS = {
    "rules": 30,  # tier 0 answers
    "humans": 40,  # tier 0 declines; tier 1 answers after a delay (or passes to tier 2)
    "skip": 14,  # tiers 0 and 1 decline; tier 2 answers
    "timeout": 4,  # tier 1 holds it; its 1 s timeout fails it TIMED_OUT
    "default": 4,  # tier 1 holds it; its 1 s timeout settles it with the default
    "abort": 8,  # goes to tier 1; its turn is aborted within 300 ms
}


@dataclass
class Run:
    n: int
    quick: bool
    concurrency: int
    settled_ttl: int
    kill_every: tuple[float, float]
    seed: int
    cluster: bool = False  # on a local Redis Cluster (three masters, three replicas)

    def settings(self) -> dict[str, Any]:
        return {
            "settled_ttl": self.settled_ttl,
            "abort_ttl": self.settled_ttl,
            "consumer_ttl": 1.5,
            "caller_ttl": 2.0,
            "agent_ttl": 2.0,
            "decision_window": 5.0,
            "orphan_claim_after": 10.0,
            "block_seconds": 2.0,
            "sweep_interval": 1.0,
            "poll_delay": 0.1,
            # Every transition also goes to the audit stream, capped far above what a
            # run writes: each settlement stays countable (the events stream has only
            # those with a claim to retract; a trail expires with its request).
            "audit_stream_maxlen": 10_000_000,
        }


@dataclass
class Slot:
    """One replica of one tier: the process running now, if any."""

    tier: int
    index: int
    generation: int = 0
    child: _procs.Child | None = None

    @property
    def base_name(self) -> str:
        return f"t{self.tier}-{self.index}"

    def up(self) -> bool:
        child = self.child
        return (
            child is not None
            and child.proc.poll() is None
            and ": ready" in child.log.read_text(errors="replace")
        )


@dataclass
class Tally:
    outcomes: dict[int, str] = field(default_factory=dict)  # i -> ANSWERED / code
    stored: dict[int, Settlement | None] = field(default_factory=dict)  # its reply key
    # i -> its request id, read from the idempotency index once the ask returned ("":
    # no request, or the index expired before it was read)
    ids: dict[int, str] = field(default_factory=dict)
    worker_kills: int = 0
    same_name_restarts: int = 0
    sweeper_kills: int = 0


def start_worker(run: Run, url: str, slot: Slot, *, new_name: bool) -> None:
    if new_name:
        slot.generation += 1
    name = slot.base_name if slot.generation == 0 else f"{slot.base_name}-g{slot.generation}"
    slot.child = _procs.Child(
        f"soak-{name}",
        [sys.executable, "-m", "bench._soak_worker", "--tier", str(slot.tier), "--consumer", name],
        _procs.env(url, PREFIX, **run.settings()),
        ready=": ready",
    )


def start_sweeper(run: Run, url: str, i: int) -> _procs.Child:
    return _procs.Child(
        f"soak-sweeper-{i}",
        [*_procs.ASKQ, "sweeper"],
        _procs.env(url, PREFIX, **run.settings()),
        ready="askq sweeper: ready",
    )


async def wait_ready(children: list[_procs.Child], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for child in children:
        while child.ready_text not in child.log.read_text(errors="replace"):
            if child.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"soak: {child.name} did not start:\n{child.log.read_text()}")
            await asyncio.sleep(0.05)


def kill9(child: _procs.Child) -> None:
    if child.proc.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
        child.proc.wait(10)
    child.stop()  # closes its log; the process is already gone


async def killer(
    run: Run, url: str, slots: list[Slot], sweepers: list[_procs.Child], tally: Tally
) -> None:
    """SIGKILL a random replica whose group has another one up; restart it soon after."""
    restarts: set[asyncio.Task[None]] = set()

    async def restart(slot: Slot, after: float) -> None:
        await asyncio.sleep(after)
        same = random.random() < 0.5
        tally.same_name_restarts += same
        start_worker(run, url, slot, new_name=not same)

    async def restart_sweeper(i: int, after: float) -> None:
        await asyncio.sleep(after)
        sweepers[i] = start_sweeper(run, url, i)

    while True:
        await asyncio.sleep(random.uniform(*run.kill_every))
        if random.random() < 0.1:
            i = random.randrange(len(sweepers))
            if all(s.proc.poll() is None for s in sweepers):
                kill9(sweepers[i])
                tally.sweeper_kills += 1
                task = asyncio.create_task(restart_sweeper(i, random.uniform(0.2, 1.5)))
                restarts.add(task)
                task.add_done_callback(restarts.discard)
            continue
        candidates = [
            s
            for s in slots
            if s.up() and all(o.up() for o in slots if o.tier == s.tier and o is not s)
        ]
        if not candidates:
            continue
        slot = random.choice(candidates)
        assert slot.child is not None
        kill9(slot.child)
        tally.worker_kills += 1
        task = asyncio.create_task(restart(slot, random.uniform(0.0, 1.0)))
        restarts.add(task)
        task.add_done_callback(restarts.discard)


async def ask_all(run: Run, seam: Seam, kinds: list[str], tally: Tally) -> None:
    left = iter(range(run.n))
    background: set[asyncio.Task[Any]] = set()

    async def abort_later(turn: str) -> None:
        await asyncio.sleep(random.uniform(0, 0.3))
        await seam.abort_turn(turn, by="soak")

    async def one(i: int) -> None:
        kind = kinds[i]
        route = {"timeout": "hold", "default": "hold", "abort": "humans"}.get(kind, kind)
        caller = Caller(agent_id=f"agent-{i % 100}", turn_id=f"turn-{i}")
        options: dict[str, Any] = {}
        if kind in ("timeout", "default"):
            options = {"timeout": 1.0, "on_timeout": "fail" if kind == "timeout" else "default"}
        if kind == "abort":
            task = asyncio.create_task(abort_later(caller.turn_id))
            background.add(task)
            task.add_done_callback(background.discard)
        key = f"soak-{i}"
        for _ in range(600):
            try:
                await seam.ask(
                    QUESTION, caller, scope={"route": route}, idempotency_key=key, **options
                )
                tally.outcomes[i] = "ANSWERED"
                break
            except AskError as exc:
                if exc.code != ErrorCode.REDIS_UNAVAILABLE:
                    tally.outcomes[i] = exc.code.value
                    break
            await asyncio.sleep(0.1)  # asked again with the same key: reattaches
        # The request and its settlement, read now: with a short ASKQ_SETTLED_TTL they
        # are soon gone.
        request_id = await seam.idempotent_request(key)
        tally.ids[i] = request_id or ""
        tally.stored[i] = await seam.settlement(request_id) if request_id else None

    async def caller_loop() -> None:
        for i in left:
            await one(i)

    await asyncio.gather(*(caller_loop() for _ in range(run.concurrency)))
    await asyncio.gather(*background, return_exceptions=True)


async def settlement_events(r: aioredis.Redis, audit_log: str) -> Counter[str]:
    """request id -> settlements recorded in the audit stream (`{p}:audit`)."""
    counts: Counter[str] = Counter()
    start = "-"
    while True:
        batch = await r.xrange(audit_log, start, "+", count=10_000)
        for _, fields in batch:
            if json.loads(fields.get("entry", "{}")).get("e") in SETTLED_EVENTS:
                counts[fields["request"]] += 1
        if len(batch) < 10_000:
            return counts
        ms, seq = batch[-1][0].split("-")
        start = f"{ms}-{int(seq) + 1}"


async def key_kinds(r: aioredis.Redis) -> Counter[str]:
    """Keys under the prefix by kind (`req`, `consumers`, `tier`, ...). A reply key
    outlives its request by design, for at most `REPLY_MIN_TTL_S` (what an ask sent
    again after a lost reply finds: `askq.redis._resend`): one that will expire within that
    floor counts as `reply (tombstone)`, not as a key left behind; one without a TTL,
    or a longer one, is `reply`."""
    kinds: Counter[str] = Counter()
    async for key in r.scan_iter(match=key_pattern(PREFIX), count=1000):
        kind = key.split(":")[1]
        if kind == "reply" and 0 < await r.ttl(key) <= REPLY_MIN_TTL_S:
            kind = "reply (tombstone)"
        kinds[kind] += 1
    return kinds


def every_node(server: RedisServer | RedisCluster, r: aioredis.Redis) -> list[aioredis.Redis]:
    """The server, or every master of the cluster (nothing may be left on any)."""
    if not isinstance(server, RedisCluster):
        return [r]
    return [
        aioredis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        for port in server.master_ports()
    ]


async def soak(run: Run) -> int:
    random.seed(run.seed)
    kinds = random.choices(list(KINDS), weights=list(KINDS.values()), k=run.n)
    tally = Tally()
    started = time.monotonic()
    with RedisCluster() if run.cluster else RedisServer() as server:
        url = server.url
        if isinstance(server, RedisCluster):  # every key of the prefix is on one master
            port = server.master_of(key_slot(("{" + PREFIX + "}").encode()))
            r = aioredis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        else:
            r = aioredis.Redis.from_url(url, decode_responses=True)
        slots = [Slot(tier, i) for tier in range(3) for i in range(REPLICAS)]
        try:
            for slot in slots:
                start_worker(run, url, slot, new_name=False)
            sweepers = [start_sweeper(run, url, i) for i in range(2)]
            await wait_ready([s.child for s in slots if s.child] + sweepers)
            ready = time.monotonic()
            settings = Settings(redis_url=url, prefix=PREFIX, **run.settings())
            async with Seam(settings=settings) as seam:
                chaos = asyncio.create_task(killer(run, url, slots, sweepers, tally))
                try:
                    await asyncio.wait_for(ask_all(run, seam, kinds, tally), 60 + run.n / 10)
                except TimeoutError:
                    pass  # what has no outcome by now is lost
                finally:
                    chaos.cancel()
                asked_for = time.monotonic() - ready
                keys = seam.keys
            ids = [tally.ids.get(i, "") for i in range(run.n)]
            events = await settlement_events(r, keys.audit_log)
            await r.delete(keys.audit_log)  # the run's own opt-in: counted, not kept
            unsettled = set(await r.zrange(keys.pending, 0, -1))
            settled = [tally.stored.get(i) for i in range(run.n)]
            # An ask for a turn already aborted is refused at once (no request is made,
            # nothing settles): an outcome, not a loss.
            refused = {
                i
                for i in range(run.n)
                if tally.outcomes.get(i) == "ABORTED" and events[ids[i]] == 0
            }
            # An outcome whose request id could no longer be read (its index expired
            # first) cannot be checked against the events: counted below as unread.
            unknown = {i for i in range(run.n) if i in tally.outcomes and not ids[i]}
            lost = [
                i
                for i in range(run.n)
                if i not in tally.outcomes
                or ids[i] in unsettled
                or (events[ids[i]] == 0 and i not in refused and i not in unknown)
            ]
            twice = sum(1 for i in ids if i and events[i] > 1)
            differ = unread = 0
            answered_by: Counter[str] = Counter()
            failed: Counter[str] = Counter()
            for i in range(run.n):
                outcome, s = tally.outcomes.get(i), settled[i]
                if outcome is None:
                    continue
                if i in refused:
                    failed["ABORTED (refused at ask: turn already aborted)"] += 1
                elif outcome != "ANSWERED":
                    failed[outcome] += 1
                if s is None:
                    unread += i not in refused  # expired before it was read
                    if outcome == "ANSWERED":
                        answered_by["(reply expired before read)"] += 1
                    continue
                differ += ("ANSWERED" if s.state == "ANSWERED" else (s.code or s.state)) != outcome
                if outcome == "ANSWERED":
                    answered_by["default (timeout)" if s.defaulted else (s.by or "?")] += 1
            answered = sum(answered_by.values())

            # Let settled state expire (replies, requests, turns, aborts, the caller's
            # inbox and heartbeat), the sweeper forget the caller, then count keys.
            expiry_started = time.monotonic()
            deadline = expiry_started + run.settled_ttl + settings.caller_ttl + 30
            while True:
                found = await key_kinds(r)
                transient = sum(n for kind, n in found.items() if kind in PER_REQUEST)
                timers_left = await r.zcard(keys.timers)
                callers_left = await r.scard(keys.callers)
                if (transient == 0 and timers_left == 0 and callers_left == 0) or (
                    time.monotonic() > deadline
                ):
                    break
                await asyncio.sleep(0.5)
            waited = time.monotonic() - expiry_started
            mine = "{" + PREFIX + "}"
            other = []
            for node in every_node(server, r):
                other += [k async for k in node.scan_iter(count=1000) if not k.startswith(mine)]
            tier_info = []
            for priority in sorted({int(p) for p in (await r.hgetall(keys.groups)).values()}):
                stream = keys.tier(priority)
                groups = await r.xinfo_groups(stream)
                consumers = sum(int(g["consumers"]) for g in groups)
                pending = sum(int(g["pending"]) for g in groups)
                tier_info.append(
                    f"tier {priority}: {await r.xlen(stream)} entries, {pending} pending,"
                    f" {consumers} consumers"
                )
            events_len = await r.xlen(keys.events)
            # arq's keys, under the prefix: each expires (in-progress marks, cron ids)
            arq_keys = [k async for k in r.scan_iter(match=keys.base + ":arq:*", count=1000)]
            arq_forever = [
                k for k in arq_keys if await r.ttl(k) == -1 and await r.type(k) != "zset"
            ]
        finally:
            _procs.stop_all()
            await r.aclose()

    per_request_left = transient + timers_left
    tombstones = found.pop("reply (tombstone)", 0)
    persistent = {k: n for k, n in sorted(found.items()) if k not in PER_REQUEST}
    w = 34
    print(
        f"soak: {run.n:,} asks, {run.concurrency} in flight, 3 tiers x {REPLICAS} replicas,"
        f" 2 sweepers, ASKQ_SETTLED_TTL={run.settled_ttl} s, seed {run.seed}"
    )
    print(
        f"{'chaos':<{w}}{tally.worker_kills} replicas SIGKILLed and restarted"
        f" ({tally.same_name_restarts} under the same name), {tally.sweeper_kills} sweepers"
    )
    print(f"{'asked':<{w}}{run.n:,} in {fmt_s(asked_for)} ({run.n / asked_for:,.0f}/s)")
    by = ", ".join(f"{k} {n:,}" for k, n in sorted(answered_by.items()))
    print(f"{'answered':<{w}}{answered:,} ({by})")
    print(f"{'failed, by code':<{w}}{', '.join(f'{k} {n:,}' for k, n in sorted(failed.items()))}")
    print(f"{'lost (must be 0)':<{w}}{len(lost)}")
    for i in lost[:10]:
        stored = settled[i]
        print(
            f"{'':<{w}}ask {i} ({kinds[i]}, request {ids[i]}): caller got"
            f" {tally.outcomes.get(i)}, stored {stored and (stored.state, stored.code)},"
            f" {events[ids[i]]} settlements, {'still' if ids[i] in unsettled else 'not'}"
            " pending"
        )
    print(f"{'settled twice (must be 0)':<{w}}{twice}")
    print(
        f"{'caller outcome != stored (0)':<{w}}{differ}"
        + (f"  ({unread} replies expired before they were read)" if unread else "")
    )
    print(
        f"{'per-request keys left (must be 0)':<{w}}{per_request_left}"
        f"  after {fmt_s(waited)} (timers left {timers_left}, callers left {callers_left})"
    )
    print(f"{'reply tombstones (expiring)':<{w}}{tombstones}  (each within {REPLY_MIN_TTL_S} s)")
    print(
        f"{'persistent keys (the deployment)':<{w}}"
        + ", ".join(f"{k} {n}" for k, n in persistent.items())
    )
    print(f"{'':<{w}}{'; '.join(tier_info)}; events {events_len:,} entries")
    print(f"{'':<{w}}arq {len(arq_keys)}, without a TTL {len(arq_forever)} {arq_forever[:3]}")
    print(f"{'keys outside the prefix':<{w}}{len(other)} {sorted(other)[:5]}")
    print(f"{'total':<{w}}{fmt_s(time.monotonic() - started)}")
    bad = lost or twice or differ or per_request_left or callers_left or other or arq_forever
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000, help="asks (default 10,000)")
    parser.add_argument("--quick", action="store_true", help="the CI run: short TTLs and waits")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--cluster", action="store_true", help="on a local Redis Cluster (3 masters, 3 replicas)"
    )
    args = parser.parse_args()
    run = Run(
        n=args.n,
        quick=args.quick,
        concurrency=args.concurrency or (50 if args.quick else 200),
        settled_ttl=2 if args.quick else 5,
        kill_every=(0.2, 0.6) if args.quick else (0.5, 2.0),
        seed=args.seed if args.seed is not None else random.randrange(1 << 30),
        cluster=args.cluster,
    )
    sys.exit(asyncio.run(soak(run)))


if __name__ == "__main__":
    main()
