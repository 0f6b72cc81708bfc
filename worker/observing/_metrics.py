"""Prometheus metrics of a worker or sweeper process (`--metrics-port`, the 'metrics'
extra), each counted where that process sees it:

    worker (runtime)   askq_offers_total{group,tier}             fresh offers read
                       askq_decisions_total{group,decision}      accepted | declined | answered
                       askq_decision_seconds{group}              offer read -> decision written
                       askq_asks_total{group,outcome}            what became of the requests the
                       askq_settlement_seconds{group,outcome}    group held (answered here,
                                                                 answered_elsewhere, aborted,
                                                                 timed_out, no_answerer,
                                                                 escalated, released); seconds
                                                                 since the ask
                       askq_passed_on_total{group,tier,how}      the group passed a request on
                                                                 (declined, released, escalated):
                                                                 a tier falls through once all
                                                                 of its groups have
                       askq_reminders_total{group}               reminders its channel ran
    worker (sends)     askq_sends_total{group,channel,result}    ok | retry | failed
    sweeper            askq_timers_fired_total{kind}             window|escalate|remind|timeout
                       askq_timer_lateness_seconds{kind}         due time -> fired
                       askq_recovered_total{what}                callers_gone | orphans_released
    either             askq_redis_full                           1 while this process sees Redis
                                                                 refuse writes for lack of
                                                                 memory (_full.py), else 0
                       askq_redis_full_refusals_total{kind}      writes it saw refused for
                                                                 memory (command, heartbeat,
                                                                 blocking_loop, queue)
    read from Redis    askq_pending_requests{state,tier}         the oldest PENDING_SAMPLE pending
    at scrape time     askq_pending_requests_total               all pending (ZCARD)
                       askq_sweeper_lag_seconds                  how overdue the oldest timer is
                       askq_timers_scheduled                     timers waiting
                       askq_redis_memory_used_bytes{shard}       INFO memory of the server holding
                       askq_redis_maxmemory_bytes{shard}         each shard (0: no limit): full
                                                                 when used reaches max

Without the extra nothing here imports prometheus_client: the process records into
`Recorder` (`_recorder.py`), whose methods do nothing (a Python call each, no Redis round trip: see
`bench/metrics_cost.py`). `start_metrics` (and `serve_metrics`) swaps in the Prometheus
recorder.
"""

from __future__ import annotations

import errno
import logging
import socket
from dataclasses import dataclass
from typing import Any

from ..protocol import _recorder
from ..protocol._errors import AskError, ErrorCode
from ..protocol._recorder import Recorder
from ..protocol._settings import Settings
from ..protocol._text import quoted
from ..redis._cluster import ClusterUrl, is_cluster_url, sync_master_client
from ..redis._keys import Keys
from ..redis._outage import outage, unreachable
from ..redis._sentinel import is_sentinel_url, sync_sentinel_client
from ..redis._shards import Layout

log = logging.getLogger("askq.metrics")

PENDING_SAMPLE = 1000  # pending requests read per scrape, oldest first: a bounded cost
SECONDS_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400)
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class PrometheusRecorder(Recorder):
    enabled = True

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Histogram

        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

        def counter(name: str, doc: str, labels: list[str]) -> Any:
            return Counter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, labels: list[str], buckets: Any) -> Any:
            return Histogram(name, doc, labels, registry=registry, buckets=buckets)

        self._offers = counter("askq_offers", "Fresh offers read by a group.", ["group", "tier"])
        self._decisions = counter(
            "askq_decisions", "A group's decisions on offers.", ["group", "decision"]
        )
        self._decision_seconds = histogram(
            "askq_decision_seconds", "Offer read to decision written.", ["group"], FAST_BUCKETS
        )
        self._asks = counter(
            "askq_asks", "What became of the requests a group held.", ["group", "outcome"]
        )
        self._settlement_seconds = histogram(
            "askq_settlement_seconds",
            "Seconds from the ask to its outcome, for the requests a group held.",
            ["group", "outcome"],
            SECONDS_BUCKETS,
        )
        self._passed_on = counter(
            "askq_passed_on", "A group passed a request on.", ["group", "tier", "how"]
        )
        self._reminders = counter("askq_reminders", "Reminders a channel ran.", ["group"])
        self._sends = counter(
            "askq_sends", "A group's channel sends by result.", ["group", "channel", "result"]
        )
        self._fired = counter("askq_timers_fired", "Timers the sweeper fired.", ["kind"])
        self._lateness = histogram(
            "askq_timer_lateness_seconds", "Due time to fired.", ["kind"], FAST_BUCKETS
        )
        self._recovered = counter("askq_recovered", "Sweeper recovery, by kind.", ["what"])
        from prometheus_client import Gauge

        self._full = Gauge(
            "askq_redis_full",
            "1 while this process sees Redis refuse writes for lack of memory (maxmemory).",
            registry=registry,
        )
        self._full_refusals = counter(
            "askq_redis_full_refusals",
            "Writes this process saw Redis refuse for lack of memory, by kind.",
            ["kind"],
        )

    def _child(self, metric: Any, *labels: str) -> Any:
        """The labelled series, cached: prometheus_client's `labels()` costs ~3 µs a
        call here (a lock and a dict under it), an `inc()` on the child a third of that."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def offered(self, group: str, tier: int) -> None:
        self._child(self._offers, group, str(tier)).inc()

    def decided(self, group: str, decision: str, seconds: float) -> None:
        self._child(self._decisions, group, decision).inc()
        self._child(self._decision_seconds, group).observe(seconds)

    def settled(self, group: str, outcome: str, seconds: float) -> None:
        self._child(self._asks, group, outcome).inc()
        self._child(self._settlement_seconds, group, outcome).observe(seconds)

    def passed_on(self, group: str, tier: int, how: str) -> None:
        self._child(self._passed_on, group, str(tier), how).inc()

    def reminded(self, group: str) -> None:
        self._child(self._reminders, group).inc()

    def sent(self, group: str, channel: str, result: str) -> None:
        self._child(self._sends, group, channel, result).inc()

    def fired(self, kind: str, lateness: float) -> None:
        self._child(self._fired, kind).inc()
        self._child(self._lateness, kind).observe(lateness)

    def recovered(self, what: str, count: int) -> None:
        if count:
            self._child(self._recovered, what).inc(count)

    def redis_full(self, full: bool) -> None:
        self._full.set(1 if full else 0)

    def full_refused(self, kind: str) -> None:
        self._child(self._full_refusals, kind).inc()


class RedisCollector:
    """Gauges read from Redis when Prometheus scrapes (in the server's thread, on a
    connection of its own): pending requests by state and tier, and timer lag. Bounded:
    ZCARDs, one ZRANGE of at most PENDING_SAMPLE ids and their states in one pipeline."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = Keys(settings.prefix)
        # Every shard's keys (ASKQ_SHARDS): on a cluster, each read on its own master.
        self.shards = Layout(settings.prefix, settings.shards).all_keys
        self._redis: Any = None
        self._by_tag: dict[str, Any] = {}

    def _client(self, keys: Keys | None = None) -> Any:
        tag = (keys or self.keys).tag or self.settings.prefix
        if is_cluster_url(self.settings.redis_url) and tag != self.settings.prefix:
            if tag not in self._by_tag:
                self._by_tag[tag] = sync_master_client(
                    ClusterUrl.parse(self.settings.redis_url),
                    tag,
                    decode_responses=True,
                    socket_timeout=self.settings.socket_timeout,
                    socket_connect_timeout=self.settings.socket_timeout,
                    client_name=f"askq-metrics-{id(self):x}",
                )
            return self._by_tag[tag]
        if self._redis is None and is_sentinel_url(self.settings.redis_url):  # _sentinel.py
            self._redis = sync_sentinel_client(self.settings, f"askq-metrics-{id(self):x}")
        if self._redis is None:
            import redis

            options: dict[str, Any] = {
                "decode_responses": True,
                "socket_timeout": self.settings.socket_timeout,
                "socket_connect_timeout": self.settings.socket_timeout,
                "client_name": f"askq-metrics-{id(self):x}",
            }
            url = self.settings.redis_url
            if is_cluster_url(url):  # the master holding the deployment's keys, now
                self._redis = sync_master_client(
                    ClusterUrl.parse(url), self.settings.prefix, **options
                )
            else:
                self._redis = redis.Redis.from_url(url, **options)
        return self._redis

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily("askq_redis_up", "1 when the scrape could read Redis.")
        try:
            families = self._read()
        except Exception as exc:  # noqa: BLE001 - a scrape must answer, Redis or not
            if unreachable(exc):
                outage.failed("metrics", exc)  # once per outage, not per scrape
            else:
                log.warning("metrics: cannot read Redis: %s", exc)
            if is_cluster_url(self.settings.redis_url):
                self._redis = None  # the next scrape asks which master holds the keys
                self._by_tag.clear()
            up.add_metric([], 0)
            yield up
            return
        outage.reached()
        up.add_metric([], 1)
        yield up
        yield from families

    def _read(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        total = timers = 0
        rows: list[Any] = []
        heads: list[float] = []
        used = GaugeMetricFamily(
            "askq_redis_memory_used_bytes",
            "Memory the Redis server holding the shard uses (INFO memory).",
            labels=["shard"],
        )
        limit = GaugeMetricFamily(
            "askq_redis_maxmemory_bytes",
            "Its maxmemory (0: none). At the limit, with noeviction, it refuses writes.",
            labels=["shard"],
        )
        for index, k in enumerate(self.shards):  # each shard's (one, by default)
            r = self._client(k)
            memory = _memory(r)
            if memory is not None:
                used.add_metric([str(index)], memory[0])
                limit.add_metric([str(index)], memory[1])
            with r.pipeline(transaction=False) as pipe:
                pipe.zcard(k.pending)
                pipe.zrange(k.pending, 0, PENDING_SAMPLE - 1)
                pipe.zcard(k.timers)
                pipe.zrange(k.timers, 0, 0, withscores=True)
                pipe.time()
                n, ids, t, head, (secs, micros) = pipe.execute()
            total, timers = total + n, timers + t
            heads += [score for _, score in head]
            with r.pipeline(transaction=False) as pipe:
                for request_id in ids:
                    pipe.hmget(k.request(request_id), "state", "tier")
                rows += pipe.execute() if ids else []
        counts: dict[tuple[str, str], int] = {}
        for state, tier in rows:
            if state:
                counts[(state, tier or "")] = counts.get((state, tier or ""), 0) + 1
        pending = GaugeMetricFamily(
            "askq_pending_requests",
            f"Pending requests by state and tier (the oldest {PENDING_SAMPLE}).",
            labels=["state", "tier"],
        )
        for (state, tier), n in sorted(counts.items()):
            pending.add_metric([state, tier], n)
        now_ms = int(secs) * 1000 + int(micros) // 1000
        lag = max(0.0, (now_ms - min(heads)) / 1000) if heads else 0.0
        return [
            pending,
            used,
            limit,
            GaugeMetricFamily("askq_pending_requests_total", "All pending requests.", total),
            GaugeMetricFamily("askq_timers_scheduled", "Timers waiting to fire.", timers),
            GaugeMetricFamily(
                "askq_sweeper_lag_seconds",
                "How overdue the oldest timer is (0 when none is due): a sweeper behind.",
                lag,
            ),
        ]


def _memory(redis: Any) -> tuple[int, int] | None:
    """(used_memory, maxmemory) from INFO memory; None where INFO is not offered."""
    try:
        info = redis.info("memory")
        return int(info["used_memory"]), int(info["maxmemory"])
    except Exception:  # noqa: BLE001 - a server without INFO (or a partial one): no figure
        return None


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where a process serves its metrics: the address and port it bound."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def __str__(self) -> str:
        every = " (every interface)" if self.host in ("0.0.0.0", "::") else ""
        return self.url + every


_ADDR_HINT = (
    "give an address of this host to listen on: 127.0.0.1 (this host only),"
    " 0.0.0.0 or :: (every interface)"
)


def _wanted(settings: Settings, port: int | None) -> tuple[int, str] | None:
    """The port asked for and the setting that asked (the flag, else the variable)."""
    if port is not None:
        return port, "--metrics-port"
    if settings.metrics_port is not None:
        return settings.metrics_port, "ASKQ_METRICS_PORT"
    return None


def check_metrics(settings: Settings, port: int | None = None) -> None:
    """What `serve_metrics` would refuse, found before a process starts anything: a
    port out of range, no prometheus-client, an ASKQ_METRICS_ADDR that names no
    address. Each is a CONFIG_ERROR naming the setting, never a resolver's error."""
    wanted = _wanted(settings, port)
    if wanted is None:
        return
    port, setting = wanted
    if not 0 <= port <= 65535:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"{setting} {port}: not a port; give 1-65535, or 0 for any free port",
        )
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"{setting} needs prometheus-client: pip install 'askq[metrics]'",
        ) from None
    addr = settings.metrics_addr
    if not addr.strip():
        raise AskError(ErrorCode.CONFIG_ERROR, f"ASKQ_METRICS_ADDR is empty; {_ADDR_HINT}")
    try:  # as prometheus-client will, so what it would fail on is named here
        socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        if addr.count(":") == 1:
            why += "; the port is --metrics-port or ASKQ_METRICS_PORT"
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"ASKQ_METRICS_ADDR {quoted(addr)}: no address to listen on ({why}); {_ADDR_HINT}",
        ) from None


def _bind_error(exc: OSError, setting: str, port: int, addr: str) -> AskError:
    if exc.errno == errno.EADDRINUSE:
        why = (
            f"{setting} {port}: port {port} on {addr} is in use by another process;"
            " pick another, or 0 for any free port"
        )
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"ASKQ_METRICS_ADDR {quoted(addr)}: not an address of this host; {_ADDR_HINT}"
    elif exc.errno == errno.EACCES:
        why = (
            f"{setting} {port}: not allowed to listen on port {port} here"
            " (below 1024 needs privileges)"
        )
    else:
        why = (
            f"{setting} {port} on ASKQ_METRICS_ADDR {quoted(addr)}: cannot listen:"
            f" {exc.strerror or exc}"
        )
    return AskError(ErrorCode.CONFIG_ERROR, why)


def start_metrics(settings: Settings, port: int | None = None) -> MetricsEndpoint | None:
    """Serve the metrics on `port` (else `ASKQ_METRICS_PORT`; 0: a free port) at
    `ASKQ_METRICS_ADDR`, and record from now on; returns the address and port bound,
    or None when no port was asked for. What cannot be served is a CONFIG_ERROR naming
    the setting (`check_metrics`; a port in use)."""
    check_metrics(settings, port)
    wanted = _wanted(settings, port)
    if wanted is None:
        return None
    port, setting = wanted
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(settings))
    try:
        server, _thread = start_http_server(port, addr=settings.metrics_addr, registry=registry)
    except OSError as exc:
        raise _bind_error(exc, setting, port, settings.metrics_addr) from None
    _recorder.recorder = PrometheusRecorder(registry)
    host, bound = server.server_address[:2]
    return MetricsEndpoint(str(host), int(bound))


def serve_metrics(settings: Settings, port: int | None = None) -> int | None:
    """`start_metrics`, returning the port bound (None when none was asked for)."""
    endpoint = start_metrics(settings, port)
    return endpoint.port if endpoint else None
