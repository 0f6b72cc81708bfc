"""The web fan-out benchmark's smoke run, so it cannot rot (its figures are not judged
here). Real Redis only: it reads INFO commandstats, which fakeredis lacks."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_the_fan_out_benchmark_runs_and_prints_its_figures(real_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.web_sse", "--quick", "--redis-url", real_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "20 open streams on one replica" in out
    for figure in ("ask -> shown, per stream:", "replica RSS:", "Redis commands per question"):
        assert figure in out
