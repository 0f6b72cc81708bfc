"""Child processes of the bench (answerer workers, helpers) and the CPU they use.

Every child writes its stderr to a log file (a pipe nobody drains would block it) and
says `ready` there once it is live; `stop_all` ends every child this run started, by
PID, whatever happened.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from ._common import ROOT

ASKQ = [sys.executable, "-m", "askq"]
LOGS = Path(tempfile.mkdtemp(prefix="askq-bench-logs-"))
_children: list[Child] = []

# One rule that answers every question with an option: its recommended one.
RULES = LOGS / "answer-all.toml"
RULES.write_text('[[rule]]\naction = "recommended"\n')


def env(url: str, prefix: str, **extra: str | float) -> dict[str, str]:
    # An outer PYTHONPATH stays in front (an A/B run points it at another askq tree).
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))
    out = {**os.environ, "ASKQ_REDIS_URL": url, "ASKQ_PREFIX": prefix, "PYTHONPATH": path}
    out.update({f"ASKQ_{k.upper()}": str(v) for k, v in extra.items()})
    return out


class Child:
    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        environ: dict[str, str],
        *,
        ready: str = "ready",
        stdin: bool = False,
        stdout: bool = False,
    ) -> None:
        self.name = name
        self.log = LOGS / f"{name}-{len(_children)}.log"
        self._log_file = self.log.open("w")
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=self._log_file,
            text=True,
            env=environ,
            cwd=ROOT,
        )
        self.ps = psutil.Process(self.proc.pid)
        self.ready_text = ready
        _children.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 30) -> Child:
        deadline = time.monotonic() + timeout
        while self.ready_text not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.02)
        return self

    def cpu(self) -> float:
        """CPU seconds used so far (user + system)."""
        t = self.ps.cpu_times()
        return t.user + t.system

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._log_file.close()
        if self in _children:
            _children.remove(self)


def _stop_on_exit() -> None:
    stop_all()
    shutil.rmtree(LOGS, ignore_errors=True)


atexit.register(_stop_on_exit)


def start_all(children: Sequence[Child]) -> list[Child]:
    """Wait until every child (started in parallel) is ready."""
    return [child.wait_ready() for child in children]


def stop_all(children: Sequence[Child] | None = None) -> None:
    for child in list(_children if children is None else children):
        child.stop()


def auto_worker(
    url: str,
    prefix: str,
    *,
    group: str = "auto",
    priority: int = 0,
    policy: str = "recommended",
    **settings: str | float,
) -> Child:
    """`askq worker auto`: answers everything (one catch-all rule), or with
    `policy="decline"` and no rules, declines everything."""
    rules = ["--rules", str(RULES)] if policy != "decline" else []
    return Child(
        f"auto-{group}",
        [*ASKQ, "worker", "auto", "--group", group, "--priority", str(priority)]
        + [*rules, "--policy", policy],
        env(url, prefix, **settings),
        ready=": ready",
    )


def hold_worker(url: str, prefix: str, **settings: str | float) -> Child:
    """A group that accepts every offer and holds the claim (a human who has not
    answered yet); anyone may answer for group `hold` later."""
    return Child("hold", [sys.executable, "-m", "bench._hold_worker"], env(url, prefix, **settings))


class CpuMeter:
    """CPU seconds used by some processes between `start()` and `stop()`."""

    def __init__(self, procs: dict[str, psutil.Process | Child]) -> None:
        self.procs = procs
        self._t0: dict[str, float] = {}
        self.wall = 0.0
        self.used: dict[str, float] = {}

    @staticmethod
    def _cpu(p: psutil.Process | Child) -> float:
        if isinstance(p, Child):
            return p.cpu()
        t = p.cpu_times()
        return t.user + t.system

    def start(self) -> None:
        self._wall0 = time.monotonic()
        self._t0 = {name: self._cpu(p) for name, p in self.procs.items()}

    def stop(self) -> dict[str, float]:
        self.wall = time.monotonic() - self._wall0
        self.used = {name: self._cpu(p) - self._t0[name] for name, p in self.procs.items()}
        return self.used

async def idle_cpu(child: Child, seconds: float) -> float:
    """The child's CPU use over `seconds` of idling, as a percentage of one core."""
    before, t0 = child.cpu(), time.monotonic()
    await asyncio.sleep(seconds)
    return 100 * (child.cpu() - before) / (time.monotonic() - t0)
