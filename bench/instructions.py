"""Instructions per offer of a worker process, counted by callgrind: a figure the load
of a shared machine does not move (wall-clock and CPU time on it swing 2-10x between
runs of the same code, so a change of a few percent is only visible this way).

    python -m bench.instructions [-n 200] [--redis-url URL]

Each worker runs under `valgrind --tool=callgrind`. This process sends warm-up asks,
zeroes the worker's counters (`callgrind_control --zero`), sends `n` sequential asks,
dumps the counters and divides. Side by side, in one run:

- the raw cycle's worker (`bench.roundtrip`: XREADGROUP, LPUSH, XACK on sync redis-py);
- `askq worker auto` answering every offer (XREADGROUP, then `claim_answer.lua`), on
  asyncio and on uvloop (`ASKQ_EVENT_LOOP=uvloop`);
- `askq worker auto --policy decline` passing every offer on (XREADGROUP, then
  `decline.lua`) to an answering worker behind it: one declining hop;
- the caller: a process calling `seam.ask` in a loop (`ask.lua`, then the reply
  waiter's BLMPOP), set against the same raw worker for scale (the raw cycle's own
  caller is this bench process).

Counted: the process's user-space instructions over the n asks (the kernel's share of
a send or a wake-up is not in them). Valgrind slows the
worker about 50x, so n stays small; the counts repeat to within 1 % between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from askq import Caller, Seam

from . import _procs
from ._common import new_prefix, wipe
from ._redis_server import redis_url_or_own
from .roundtrip import RAW_WORKER, sequential_asks

STARTUP_S = 300  # an askq worker under callgrind takes tens of seconds to import


class Counted:
    """A worker process under callgrind, its counters zeroed and dumped on demand."""

    def __init__(
        self, name: str, argv: list[str], environ: dict[str, str], ready: str, **pipes: bool
    ) -> None:
        self.out = Path(tempfile.mkdtemp(prefix="askq-callgrind-")) / "callgrind.out"
        self.child = _procs.Child(
            name,
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}", *argv],
            environ,
            ready=ready,
            **pipes,
        ).wait_ready(STARTUP_S)

    def _control(self, *flags: str) -> None:
        subprocess.run(
            ["callgrind_control", *flags, str(self.child.pid)], capture_output=True, check=True
        )

    def zero(self) -> None:
        self._control("--zero")

    def instructions(self) -> int:
        """Instructions since the last zero (a dump writes `<out>.<k>`, k counting up)."""
        self._control("--dump")
        dumps = [p for p in self.out.parent.iterdir() if re.fullmatch(r".*\.\d+", p.name)]
        last = max(dumps, key=lambda p: int(p.name.rsplit(".", 1)[1]))
        for line in last.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
        raise RuntimeError(f"no totals in {last}")

    def stop(self) -> None:
        self.child.stop()
        shutil.rmtree(self.out.parent, ignore_errors=True)


async def per_offer(worker: Counted, send: Callable[[int], Awaitable[object]], n: int) -> float:
    await send(20)  # warm up: imports, first connections, script loads
    worker.zero()
    await send(n)
    return worker.instructions() / n


async def raw(url: str, n: int) -> float:
    base = f"bench-cg-{uuid.uuid4().hex[:6]}"
    stream, reply = f"{base}:s", f"{base}:reply"
    client, waiter = aioredis.Redis.from_url(url), aioredis.Redis.from_url(url)
    await client.xgroup_create(stream, "g", id="$", mkstream=True)
    argv = [sys.executable, "-c", RAW_WORKER, url, stream, "g", reply]
    worker = Counted("raw-cg", argv, _procs.env(url, "unused"), "ready")

    async def send(k: int) -> None:
        for i in range(k):
            await client.xadd(stream, {"n": i})
            await waiter.blpop([reply], timeout=60)

    try:
        return await per_offer(worker, send, n)
    finally:
        worker.stop()
        await client.delete(stream, reply)
        await client.aclose()
        await waiter.aclose()


async def askq_worker(url: str, n: int, *, loop: str, decline: bool) -> float:
    prefix = new_prefix("cg")
    argv = [*_procs.ASKQ, "worker", "auto", "--group", "counted", "--priority", "0"]
    behind = []
    if decline:
        argv += ["--policy", "decline"]
        behind.append(_procs.auto_worker(url, prefix, group="answer", priority=1).wait_ready())
    else:
        argv += ["--rules", str(_procs.RULES), "--policy", "recommended"]
    worker = Counted("auto-cg", argv, _procs.env(url, prefix, event_loop=loop), ": ready")
    caller = Caller(agent_id="cg", turn_id="cg")
    try:
        async with Seam.from_url(url, prefix=prefix) as seam:
            await seam.tier_streams(refresh=True)

            async def send(k: int) -> None:
                await sequential_asks(seam, k, caller)

            return await per_offer(worker, send, n)
    finally:
        worker.stop()
        _procs.stop_all(behind)
        redis = aioredis.Redis.from_url(url, decode_responses=True)
        await wipe(redis, prefix)
        await redis.aclose()


# The caller side: a process that asks `n` times in a row when told to (stdin), so its
# counters can be zeroed after its warm-up and dumped when it is done.
CALLER = r"""
import asyncio, sys
from askq import Caller, Seam
from bench._common import QUESTION

async def main() -> None:
    caller = Caller(agent_id="cg", turn_id="cg")
    async with Seam() as seam:
        await seam.tier_streams(refresh=True)
        print("ready", file=sys.stderr, flush=True)
        for line in sys.stdin:
            for _ in range(int(line)):
                await seam.ask(QUESTION, caller)
            print("done", flush=True)

asyncio.run(main())
"""


async def askq_caller(url: str, n: int) -> float:
    prefix = new_prefix("cg")
    answering = _procs.auto_worker(url, prefix, group="answer", priority=0).wait_ready()
    argv = [sys.executable, "-c", CALLER]
    caller = Counted("caller-cg", argv, _procs.env(url, prefix), "ready", stdin=True, stdout=True)

    async def send(k: int) -> None:
        caller.child.send(str(k))
        assert await asyncio.to_thread(caller.child.read) == "done"

    try:
        return await per_offer(caller, send, n)
    finally:
        caller.stop()
        answering.stop()
        redis = aioredis.Redis.from_url(url, decode_responses=True)
        await wipe(redis, prefix)
        await redis.aclose()


MEASURED: dict[str, Callable[[str, int], Awaitable[float]]] = {
    "caller": askq_caller,
    "asyncio": lambda url, n: askq_worker(url, n, loop="asyncio", decline=False),
    "uvloop": lambda url, n: askq_worker(url, n, loop="uvloop", decline=False),
    "decline": lambda url, n: askq_worker(url, n, loop="asyncio", decline=True),
}


async def run(url: str, n: int, only: list[str] | None = None) -> None:
    figures = {"raw": await raw(url, n)}
    for name, measure in MEASURED.items():
        if not only or name in only:
            figures[name] = await measure(url, n)
    base = figures["raw"]
    rows = [
        ("raw cycle's worker (sync redis-py: XREADGROUP, LPUSH, XACK)", "raw"),
        ("askq worker auto, answering (asyncio)", "asyncio"),
        ("askq worker auto, answering (uvloop)", "uvloop"),
        ("askq worker auto --policy decline, one hop (asyncio)", "decline"),
        ("askq caller: seam.ask, sequential (asyncio)", "caller"),
    ]
    print(f"instructions per ask, n={n} (callgrind; user space of the process)")
    for label, key in rows:
        if key not in figures:
            continue
        print(f"  {label:62s} {figures[key] / 1e6:6.3f} M  {figures[key] / base:5.2f}x raw")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="sequential asks counted (default 200)")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--only", action="append", choices=list(MEASURED), help="repeatable")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench.instructions needs valgrind (apt-get install valgrind)")
    with redis_url_or_own(args.redis_url) as url:
        asyncio.run(run(url, args.n, args.only))


if __name__ == "__main__":
    main()
