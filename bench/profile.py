"""Profile the sequential round trip on both sides with pyinstrument:

    python -m bench.profile [-n 3000] [--out DIR] [--redis-url URL]

The caller (this process, `seam.ask` in a loop) and the `askq worker auto` process
(run under `python -m pyinstrument`) are sampled every 1 ms. Writes, per side, a
session file (`pyinstrument --load FILE` renders it), a call tree (`.txt`) and a flat
list of self time by function (printed), idle time in the event loop's select left out.
"""

from __future__ import annotations

import argparse
import asyncio
import pstats
import subprocess
import sys
from pathlib import Path

from pyinstrument import Profiler
from pyinstrument.session import Session

from askq import Seam

from . import _procs
from ._common import new_prefix, wipe
from ._redis_server import redis_url_or_own
from .roundtrip import sequential_asks

INTERVAL = 0.001
IDLE = ("select", "poll")


def render(session_file: Path, top: int) -> str:
    """The call tree to a .txt beside the session; a flat self-time table returned."""
    tree = session_file.with_suffix(".txt")
    stats = session_file.with_suffix(".pstats")
    for renderer, out in (("text", tree), ("pstats", stats)):
        subprocess.run(
            [sys.executable, "-m", "pyinstrument", "--load", str(session_file), "-r", renderer]
            + ["-p", "processor_options.filter_threshold=0", "--show-all", "-o", str(out)],
            check=True,
        )
    st = pstats.Stats(str(stats))
    rows = []
    areas: dict[str, float] = {}
    busy = 0.0
    for (path, line, func), (_, _, self_t, _, _) in st.stats.items():  # type: ignore[attr-defined]
        if func.endswith(IDLE):
            continue
        busy += self_t
        rows.append((self_t, f"{Path(path).name}:{line} {func}"))
        area = area_of(path, func)
        areas[area] = areas.get(area, 0.0) + self_t
    rows.sort(reverse=True)
    lines = [f"busy (not waiting in select): {busy:.3f} s, by area:"]
    lines += [
        f"{t / busy * 100:5.1f} %  {area}"
        for area, t in sorted(areas.items(), key=lambda kv: -kv[1])
        if t / busy >= 0.005
    ]
    lines.append("top functions by self time:")
    lines += [f"{t / busy * 100:5.1f} %  {t:7.3f} s  {where}" for t, where in rows[:top]]
    return "\n".join(lines)


AREAS = (
    ("/redis/", "redis-py (commands, pool, parser)"),
    ("/hiredis", "redis-py (commands, pool, parser)"),
    ("/asyncio/", "asyncio event loop, tasks, timeouts"),
    ("/pydantic", "pydantic (validate / dump)"),
    ("/worker/", "askq core (worker/)"),
    ("/answerers/", "auto answerer"),
    ("/bench/", "bench loop"),
)


def area_of(path: str, func: str) -> str:
    if "Schema" in func:
        return "pydantic (validate / dump)"
    if func.startswith("socket.") or "sock" in func:
        return "socket syscalls"
    for needle, area in AREAS:
        if needle in path:
            return area
    return "other builtins" if path == "<built-in>" else "other Python code"


async def profile(url: str, n: int, out: Path) -> None:
    prefix = new_prefix("prof")
    worker_session = out / "worker.pyisession"
    worker = _procs.Child(
        "auto-profiled",
        [sys.executable, "-m", "pyinstrument", "-i", str(INTERVAL), "-r", "pyisession"]
        + ["-o", str(worker_session), "-m", "askq", "worker", "auto"]
        + ["--rules", str(_procs.RULES)],
        _procs.env(url, prefix),
        ready=": ready",
    ).wait_ready()
    try:
        async with Seam.from_url(url, prefix=prefix) as seam:
            await sequential_asks(seam, 100)
            profiler = Profiler(interval=INTERVAL, async_mode="disabled")
            profiler.start()
            samples = await sequential_asks(seam, n)
            profiler.stop()
            profiler.last_session.save(str(out / "caller.pyisession"))  # type: ignore[union-attr]
    finally:
        worker.stop()
        from redis.asyncio import Redis

        r = Redis.from_url(url)
        await wipe(r, prefix)
        await r.aclose()
    samples.sort()
    print(f"{n} round trips, median {samples[n // 2] * 1e3:.2f} ms (profiled, so slower)")
    Session.load(str(worker_session))  # fails loudly if the worker did not write it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/askq-bench-profile"))
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with redis_url_or_own(args.redis_url) as url:
        asyncio.run(profile(url, args.n, args.out))
    for side in ("caller", "worker"):
        print(f"\n== {side} (tree: {args.out / side}.txt)")
        print(render(args.out / f"{side}.pyisession", args.top))


if __name__ == "__main__":
    main()
