"""A Redis Sentinel deployment on loopback for the tests: one master, one replica and
three sentinels (quorum 2), each its own `redis-server` process on a free port, in the
test's directory, stopped by PID.

    with SentinelSet(tmp_path) as s:
        s.url            # redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster/0
        s.failover()     # SENTINEL FAILOVER: the replica is promoted
        s.kill_master()  # SIGKILL of the master: the sentinels promote the replica

Short timings (a master is down after 2 s without answering) so a failover takes a few
seconds. `extra` adds redis.conf directives to both data nodes (e.g.
min-replicas-to-write).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import redis

from bench._redis_server import free_port, redis_server_binary

SERVICE = "mymaster"


class SentinelSet:
    def __init__(self, directory: Path, *, extra: tuple[str, ...] = ()) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server is not on PATH")
        self.binary = binary
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra = extra
        self.data_ports = [free_port(), free_port()]  # [0] starts as the master
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        self.url = f"redis+sentinel://{hosts}/{SERVICE}/0"

    # --- start and stop ------------------------------------------------------------------

    def _data_node(self, port: int, replica_of: int | None) -> None:
        node_dir = self.dir / f"redis-{port}"
        node_dir.mkdir(exist_ok=True)
        argv = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(node_dir),
            "--logfile", str(node_dir / "redis.log"),
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
        for directive in self.extra:
            name, _, value = directive.partition(" ")
            argv += [f"--{name}", value]
        self.procs[port] = subprocess.Popen(argv, stdout=subprocess.DEVNULL)

    def _sentinel(self, port: int) -> None:
        conf = self.dir / f"sentinel-{port}.conf"
        master = self.data_ports[0]
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"logfile {self.dir / f'sentinel-{port}.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n"
            # 2 s, not 1: on a loaded CI machine a master starved of the CPU for a second
            # was failed over before the test's own fault, and the test then killed the
            # new master with its replica (the old one) still loading its copy.
            f"sentinel down-after-milliseconds {SERVICE} 2000\n"
            f"sentinel failover-timeout {SERVICE} 4000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self.procs[port] = subprocess.Popen(
            [self.binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL
        )

    def start(self, timeout: float = 30) -> SentinelSet:
        self._data_node(self.data_ports[0], None)
        self._data_node(self.data_ports[1], self.data_ports[0])
        for port in self.sentinel_ports:
            self._sentinel(port)
        self.wait_settled(timeout)
        return self

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def __enter__(self) -> SentinelSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the sentinels see ----------------------------------------------------------

    def sentinel(self, port: int | None = None) -> redis.Redis:
        port = port or self.sentinel_ports[0]
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, decode_responses=True)

    def master_port(self) -> int:
        """The master's port as a majority of the sentinels report it."""
        seen: dict[int, int] = {}
        for port in self.sentinel_ports:
            client = self.sentinel(port)
            try:
                _, master = client.sentinel_get_master_addr_by_name(SERVICE)
                seen[int(master)] = seen.get(int(master), 0) + 1
            except (redis.RedisError, TypeError):
                continue
            finally:
                client.close()
        best = max(seen, key=lambda p: seen[p]) if seen else 0
        return best if seen.get(best, 0) >= 2 else 0

    def _settled(self) -> bool:
        """Every sentinel knows the master, the two other sentinels and a replica in
        sync (so a failover can happen), and the master has its replica connected."""
        master = self.master_port()
        if not master:
            return False
        for port in self.sentinel_ports:
            client = self.sentinel(port)
            try:
                state = client.sentinel_master(SERVICE)
                replicas = client.sentinel_slaves(SERVICE)
            except redis.RedisError:
                return False
            finally:
                client.close()
            if state.get("num-other-sentinels", 0) < 2 or int(state["port"]) != master:
                return False
            if not any(r["master-link-status"] == "ok" and not r["is_sdown"] for r in replicas):
                return False
        node = redis.Redis(host="127.0.0.1", port=master, socket_timeout=2)
        try:
            return int(node.info("replication")["connected_slaves"]) >= 1
        except redis.RedisError:
            return False
        finally:
            node.close()

    def wait_settled(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self._settled():
            for port, proc in self.procs.items():
                if proc.poll() is not None and port not in self.killed:
                    raise RuntimeError(f"redis-server on {port} exited: see {self.dir}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinel set did not settle in {timeout} s: {self.dir}")
            time.sleep(0.1)

    def events(self) -> str:
        """What the sentinels did (failovers, promotions, nodes seen down and converted),
        from their logs, in time order: for a failing test's message."""
        wanted = ("+sdown", "-sdown", "+odown", "+switch-master", "+promoted-slave",
                  "+convert-to-slave", "+selected-slave", "+failover-end")  # fmt: skip
        lines = []
        for port in self.sentinel_ports:
            log = self.dir / f"sentinel-{port}.log"
            if not log.exists():
                continue
            for line in log.read_text(errors="replace").splitlines():
                # 13202:X 02 Dec 2026 12:32:42.305 # +sdown master mymaster 127.0.0.1 50773
                found = re.match(r"\d+:X \d+ \w+ \d+ ([\d:.]+) [#*] (.*)", line)
                if found and any(word in found[2] for word in wanted):
                    lines.append(f"{found[1]} sentinel {port}: {found[2]}")
        return "\n".join(sorted(lines))

    # --- faults --------------------------------------------------------------------------

    def failover(self) -> int:
        """SENTINEL FAILOVER (the master is up): returns the old master's port."""
        old = self.master_port()
        client = self.sentinel()
        try:
            client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            client.close()
        return old

    def kill_master(self) -> int:
        """SIGKILL the master process: returns its port."""
        old = self.master_port()
        self.killed.add(old)
        os.kill(self.procs[old].pid, signal.SIGKILL)
        self.procs[old].wait(10)
        return old

    def restart(self, port: int) -> None:
        """Start a killed data node again, as its supervisor would (as a master: the
        sentinels then make it a replica of the current master)."""
        self.killed.discard(port)
        self._data_node(port, None)

    def wait_master_moved(self, old: int, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while True:
            master = self.master_port()
            if master and master != old:
                return master
            if time.monotonic() > deadline:
                raise RuntimeError(f"no failover away from {old} in {timeout} s: {self.dir}")
            time.sleep(0.05)
