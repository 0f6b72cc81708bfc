"""A private `redis-server` on a free loopback port, for benchmarks and the
fault-injection tests: no RDB snapshots, AOF (`appendfsync everysec`) when asked, its
own directory. Stopped by PID; it can also be SIGKILLed and started again on the same
port and directory, which replays the AOF.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


class RedisServer:
    """`with RedisServer() as server: server.url`, or `server = RedisServer(dir,
    aof=True).start()`; `server.kill9()`; `server.start()`; `server.stop()`. Only ever
    binds 127.0.0.1. Without `directory`, a temporary one, removed at `stop()`."""

    def __init__(
        self, directory: Path | None = None, *, port: int | None = None, aof: bool = False
    ) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError(
                "redis-server is not on PATH: install it (apt-get install redis-server)"
                " or pass --redis-url redis://127.0.0.1:6379/15"
            )
        self.binary = binary
        self._own_dir = directory is None
        self.dir = Path(directory or tempfile.mkdtemp(prefix="askq-redis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.aof = aof
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def log(self) -> Path:
        return self.dir / "redis.log"

    def argv(self) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "everysec"]
            if self.aof
            else ["--appendonly", "no"]
        )
        return [
            self.binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            *persistence,
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.log),
            "--daemonize",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--timeout",
            "0",
        ]

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)

    def start(self, timeout: float = 15) -> RedisServer:
        """Start (or start again, on the same port and directory) and wait until it
        answers PING, which is after the AOF is loaded."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        deadline = time.monotonic() + timeout
        while True:  # the port of a killed server may take a moment to free up
            self.proc = subprocess.Popen(
                self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if self._wait_up(deadline):
                break
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server did not start on {self.port}:\n{tail}")
            time.sleep(0.1)
        self.starts += 1
        return self

    def _wait_up(self, deadline: float) -> bool:
        assert self.proc is not None
        client = self.client()
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.BusyLoadingError:
                    pass
                except redis.ConnectionError:
                    pass
                time.sleep(0.02)
            return False
        finally:
            client.close()

    def kill9(self) -> None:
        """SIGKILL the server process (not the machine): what it had write()n to the
        AOF survives in the page cache."""
        proc = self.proc
        assert proc is not None and proc.poll() is None, "not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def redis_url_or_own(redis_url: str | None) -> Iterator[str]:
    """`redis_url`, or a private server's for the block (stopped after it, with every
    child process a benchmark started against it)."""
    from . import _procs  # (not at import: the fault tests use this module alone)

    server = None if redis_url else RedisServer().start()
    try:
        yield redis_url or server.url  # type: ignore[union-attr]
    finally:
        _procs.stop_all()
        if server is not None:
            server.stop()
