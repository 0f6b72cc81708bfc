"""bench.discord_roundtrip's smoke run, so it cannot rot (its figures are not judged
here): every row printed, and nothing of its prefix left in Redis."""

from __future__ import annotations

import subprocess
import sys

import redis
from conftest import ROOT


def test_the_discord_round_trip_benchmark_runs_and_prints_every_row(real_url: str) -> None:
    client = redis.Redis.from_url(real_url)
    before = set(client.scan_iter(match="{bench-discord-*", count=1000))
    done = subprocess.run(
        [sys.executable, "-m", "bench.discord_roundtrip", "-n", "3", "--redis-url", real_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line[:42].strip() for line in done.stdout.splitlines()[1:]]
    assert rows == [
        "ask → message posted to Discord",
        "message → click answered, agent resumes",
        "message → edited in place",
        "Discord round trip (ask → answer)",
    ]
    try:
        assert set(client.scan_iter(match="{bench-discord-*", count=1000)) - before == set()
    finally:
        client.close()
