"""bench.mcp_roundtrip's smoke run, so it cannot rot (its figures are not judged here):
every row printed, and nothing of its prefix left in Redis."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("mcp")


def test_the_mcp_round_trip_benchmark_runs_and_prints_every_row(real_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.mcp_roundtrip", "-n", "3", "--redis-url", real_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line[:36].strip() for line in done.stdout.splitlines()[1:]]
    assert rows[0] == "seam.ask (no MCP)"
    for transport in ("stdio", "http"):
        for version in ("2025-11-25", "2026-07-28"):
            assert f"askq mcp, {transport}, {version}" in rows
    assert rows.count("tools/list (the SDK's floor)") == 4
