"""A private Redis Cluster on loopback, for the cluster tests and benchmarks: three
masters and three replicas (`redis-server --cluster-enabled yes` on free ports, then
`redis-cli --cluster create ... --cluster-replicas 1`), nothing saved to disk, each
node in a directory of its own. Stopped by PID. `kill_master(slot)` SIGKILLs the master
of a slot and waits until its replica has taken over.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.crc import key_slot

# Short enough that a failover takes seconds, long enough not to flap on a busy machine.
NODE_TIMEOUT_MS = 2000


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port(taken: set[int]) -> int:
    """A free port P whose cluster bus port (P + 10000) is free too; P <= 55535."""
    while True:
        port = random.randrange(20000, 45000)
        if port not in taken and port + 10000 not in taken:
            if _bindable(port) and _bindable(port + 10000):
                taken.update((port, port + 10000))
                return port


class RedisCluster:
    """`with RedisCluster() as cluster: cluster.url` (`redis+cluster://` seeds)."""

    def __init__(self, masters: int = 3, replicas: int = 1) -> None:
        for tool in ("redis-server", "redis-cli"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not on PATH: apt-get install redis-server")
        self.masters, self.replicas = masters, replicas
        self.dir = Path(tempfile.mkdtemp(prefix="askq-cluster-"))
        taken: set[int] = set()
        self.ports = [cluster_port(taken) for _ in range(masters * (1 + replicas))]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])

    def _start_node(self, port: int) -> None:
        node_dir = self.dir / str(port)
        node_dir.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [
                "redis-server",
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(node_dir / "nodes.conf"),
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--save", "",
                "--appendonly", "no",
                "--repl-diskless-sync-delay", "0",
                "--dir", str(node_dir),
                "--logfile", str(node_dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def start(self) -> RedisCluster:
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            self._client(port, wait=10.0).close()
        subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas", str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )  # fmt: skip
        self.wait_ok()
        return self

    def _client(self, port: int, wait: float = 0.0) -> redis.Redis:
        deadline = time.monotonic() + wait
        while True:
            client = redis.Redis(
                host="127.0.0.1", port=port, socket_timeout=2, decode_responses=True
            )
            try:
                client.ping()
                return client
            except redis.ConnectionError:
                client.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def alive_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says the cluster is ok and agrees on who owns what."""
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for port in self.alive_ports():
                client = self._client(port)
                try:
                    info = client.execute_command("CLUSTER", "INFO")
                    states.append("cluster_state:ok" in info)
                finally:
                    client.close()
            if states and all(states) and self._coverage_agrees() and self._replicas_synced():
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not become ok")
            time.sleep(0.1)

    def _coverage_agrees(self) -> bool:
        layouts = set()
        for port in self.alive_ports():
            client = self._client(port)
            try:
                slots = client.execute_command("CLUSTER", "SLOTS")
            finally:
                client.close()
            layouts.add(tuple(sorted((int(s[0]), int(s[1]), int(s[2][1])) for s in slots)))
        return len(layouts) == 1 and sum(e - s + 1 for s, e, _ in next(iter(layouts))) == 16384

    def _replicas_synced(self) -> bool:
        """Every live replica has its master link up (a replica that never synced
        cannot take over), and there are as many as asked for while all nodes live."""
        synced = 0
        for port in self.alive_ports():
            client = self._client(port)
            try:
                info = client.info("replication")
            finally:
                client.close()
            if info.get("role") == "slave":
                if info.get("master_link_status") != "up":
                    return False
                synced += 1
        whole = len(self.alive_ports()) == len(self.ports)
        return synced == self.masters * self.replicas or not whole

    def master_of(self, slot: int) -> int:
        client = self._client(self.alive_ports()[0])
        try:
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(master[1])
        finally:
            client.close()
        raise RuntimeError(f"no master owns slot {slot}")

    def master_ports(self) -> list[int]:
        client = self._client(self.alive_ports()[0])
        try:
            return sorted({int(s[2][1]) for s in client.execute_command("CLUSTER", "SLOTS")})
        finally:
            client.close()

    def kill_master(self, tag: str, timeout: float = 30.0) -> int:
        """SIGKILL the master owning `{tag}`'s slot; return once a replica owns it."""
        slot = key_slot(("{" + tag + "}").encode())
        port = self.master_of(slot)
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(timeout=10)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.master_of(slot) != port:
                    self.wait_ok(timeout=max(1.0, deadline - time.monotonic()))
                    return port
            except (redis.RedisError, RuntimeError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"no replica took over slot {slot} from :{port}")

    def restart(self, port: int) -> None:
        """Start a killed node again (it rejoins as a replica of its old slots' owner)."""
        self._start_node(port)
        self._client(port, wait=10.0).close()

    def flush(self) -> None:
        for port in self.master_ports():
            client = self._client(port)
            try:
                client.flushall()
            finally:
                client.close()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
