"""A throwaway `redis-server` on a free loopback port: no persistence, stopped by PID."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """`with RedisServer() as server: server.url` — a private server for one bench run."""

    def __init__(self, binary: str = "redis-server") -> None:
        path = shutil.which(binary)
        if path is None:
            raise SystemExit(
                f"bench: {binary} not found; install it (apt-get install redis-server)"
                " or pass --redis-url redis://127.0.0.1:6379/15"
            )
        self.binary = path
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = Path(tempfile.mkdtemp(prefix="askq-bench-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--logfile",
                str(self.dir / "redis.log"),
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise SystemExit(f"bench: redis-server did not start:\n{log}") from None
                time.sleep(0.05)
        client.close()
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
