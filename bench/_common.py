"""What every section shares: the run's settings, the result rows, statistics, and the
tiny Redis helpers (a fresh key prefix per section, wiped at its end)."""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from askq.cli._demo import SEED_QUESTION as SEED

ROOT = Path(__file__).resolve().parent.parent

# The question every section asks: the seed's (one question, a recommended option).
QUESTION: dict[str, Any] = SEED
# What a group holding the claim answers with (any valid answer will do).
ANSWER: list[dict[str, Any]] = [
    {"id": q["id"], "selected": [q["options"][0]["label"]]} for q in SEED["questions"]
]


@dataclass
class Config:
    """How big each section is. `quick` is the CI smoke run (seconds, not figures)."""

    n: int = 3000  # sequential round trips (abort and fall-through take n // 3)
    arq_default_n: int = 20  # arq with 0.5 s polls is slow: few samples suffice
    arq_tuned_n: int = 1000
    idle_seconds: float = 3.0
    workers: tuple[int, ...] = (1, 2, 4)
    callers: tuple[int, ...] = (1, 10, 100, 1000)
    throughput_seconds: float = 3.0
    pending_sizes: tuple[int, ...] = (10_000, 100_000)  # asks pending at once, one run each
    tiers: tuple[int, ...] = (1, 3, 5)
    cleanup_n: int = 10_000
    settled_ttl: int = 2
    quick: bool = False

    @classmethod
    def quick_run(cls) -> Config:
        return cls(
            n=60,
            arq_default_n=2,
            arq_tuned_n=20,
            idle_seconds=0.3,
            workers=(1, 2),
            callers=(1, 100),
            throughput_seconds=0.3,
            pending_sizes=(300, 1000),
            tiers=(1, 3),
            cleanup_n=300,
            settled_ttl=1,
            quick=True,
        )

    @property
    def side_n(self) -> int:
        return max(10, self.n // 3)


@dataclass
class Row:
    """One line of the table."""

    measure: str
    figure: str
    beside: str = ""
    goal: str = ""
    met: bool | None = None  # None: no goal on this line


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.rows.append(Row(*args, **kwargs))


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@dataclass(frozen=True)
class Latency:
    """Median and p99 of a list of seconds."""

    median: float
    p99: float
    n: int

    @classmethod
    def of(cls, samples: list[float]) -> Latency:
        return cls(statistics.median(samples), percentile(samples, 0.99), len(samples))

    def __str__(self) -> str:
        return f"{fmt_s(self.median)} / {fmt_s(self.p99)}"


def fmt_s(seconds: float) -> str:
    """A duration in the unit that reads best."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def new_prefix(section: str) -> str:
    return f"bench-{section}-{uuid.uuid4().hex[:6]}"


def key_pattern(prefix: str) -> str:
    return "{" + prefix + "}:*"


async def count_keys(r: aioredis.Redis, prefix: str) -> int:
    return sum([1 async for _ in r.scan_iter(match=key_pattern(prefix), count=1000)])


async def wipe(r: aioredis.Redis, prefix: str) -> None:
    batch: list[Any] = []
    async for key in r.scan_iter(match=key_pattern(prefix), count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await r.unlink(*batch)
            batch.clear()
    if batch:
        await r.unlink(*batch)


async def redis_cpu(r: aioredis.Redis) -> float:
    """CPU seconds redis-server has used (user + system), from INFO: works remotely too."""
    info = await r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def now() -> float:
    """CLOCK_MONOTONIC: one clock for every process of this machine."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass
class Context:
    """One bench run: where Redis is, how big to go, and figures sections share."""

    url: str
    cfg: Config
    redis: aioredis.Redis
    redis_pid: int | None = None
    results: dict[str, Any] = field(default_factory=dict)
