"""Prometheus metrics (issue 15, item 4) as an operator scrapes them: `askq worker` and
`askq sweeper` processes with `--metrics-port`, a known sequence of asks, the
endpoints parsed with prometheus_client's own parser, the counts asserted. And the
core without the extra: runs, and `--metrics-port` is one CONFIG_ERROR line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Backend, running
from prometheus_client.parser import text_string_to_metric_families
from test_cli_errors import one_line_error
from test_processes import ASKQ, askq

from askq import Caller, Seam
from askq.answerers.memory import MemoryAnswerer

QUESTION = ["-q", "Deploy now?", "-o", "Yes (Recommended)", "-o", "No"]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@contextlib.contextmanager
def serving(backend: Backend, *args: str, **env: str) -> Iterator[str]:
    """An askq process with --metrics-port 0; yields the URL its ready line says it
    serves on: the address and the port it bound (issue 22, item 14)."""
    proc = subprocess.Popen(
        [*ASKQ, *args, "--metrics-port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(ASKQ_METRICS_ADDR="127.0.0.1", **env),
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"metrics on (http://127\.0\.0\.1:(\d+)/metrics)[,:)]", line)
        assert found, line + proc.stderr.read()
        assert int(found.group(2)) > 0, line  # the port bound, not the 0 asked for
        yield found.group(1)
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_worker_metrics_after_a_known_sequence_of_asks(backend: Backend, seam: Seam) -> None:
    """Three asks: tier 0 (policy decline) passes each on, tier 10 answers each."""
    with (
        serving(backend, "worker", "auto", "--group", "picky", "--policy", "decline") as picky,
        serving(backend, "worker", "auto", "--group", "rules", "--priority", "10") as rules,
    ):
        for _ in range(3):
            result = await asyncio.to_thread(askq, backend, "ask", *QUESTION)
            assert result.returncode == 0, result.stderr
        tier0, tier10 = scrape(picky), scrape(rules)

        # One more ask, held by a group that shows it and does not answer (tier -1):
        # pending by state, read from Redis at scrape time, by either endpoint.
        holder = MemoryAnswerer()
        async with running(seam, holder, "desk", priority=-1):
            ask = asyncio.create_task(
                seam.ask({"questions": [_question()]}, Caller(agent_id="a", turn_id="t-held"))
            )
            await holder.next_presented()
            held = await asyncio.to_thread(scrape, picky)
            await seam.abort_turn("t-held")
            await asyncio.gather(ask, return_exceptions=True)

    assert value(tier0, "askq_offers_total", group="picky", tier="0") == 3
    assert value(tier0, "askq_decisions_total", group="picky", decision="declined") == 3
    assert value(tier0, "askq_passed_on_total", group="picky", tier="0", how="declined") == 3
    assert value(tier0, "askq_decision_seconds_count", group="picky") == 3
    assert value(tier0, "askq_asks_total", group="picky", outcome="answered") == 0

    assert value(tier10, "askq_offers_total", group="rules", tier="10") == 3
    assert value(tier10, "askq_decisions_total", group="rules", decision="answered") == 3
    assert value(tier10, "askq_asks_total", group="rules", outcome="answered") == 3
    assert value(tier10, "askq_settlement_seconds_count", group="rules", outcome="answered") == 3
    assert (
        value(
            tier10, "askq_settlement_seconds_bucket", group="rules", outcome="answered", le="+Inf"
        )
        == 3
    )
    assert value(tier10, "askq_pending_requests_total") == 0
    assert value(tier10, "askq_redis_up") == 1

    assert value(held, "askq_pending_requests", state="CLAIMED", tier="-1") == 1
    assert value(held, "askq_pending_requests_total") == 1


def _question() -> dict[str, object]:
    return {
        "id": "q1",
        "header": "Deploy",
        "question": "Deploy now?",
        "options": [{"label": "Yes (Recommended)"}, {"label": "No"}],
    }


async def test_sweeper_metrics_count_the_timers_it_fires(backend: Backend, seam: Seam) -> None:
    """A group that reminds after 0.2 s holds two asks: the sweeper fires their
    reminders and says how late."""
    holder = MemoryAnswerer()
    with serving(backend, "sweeper") as url:
        async with running(seam, holder, "desk", remind_after=0.2):
            asks = [
                asyncio.create_task(
                    seam.ask({"questions": [_question()]}, Caller(agent_id="a", turn_id="t-r"))
                )
                for _ in range(2)
            ]
            for _ in range(2):
                await holder.next_presented()
            for _ in range(100):
                samples = await asyncio.to_thread(scrape, url)
                if value(samples, "askq_timers_fired_total", kind="remind") >= 2:
                    break
                await asyncio.sleep(0.1)
            await seam.abort_turn("t-r")
            await asyncio.gather(*asks, return_exceptions=True)
    assert value(samples, "askq_timers_fired_total", kind="remind") == 2
    assert value(samples, "askq_timer_lateness_seconds_count", kind="remind") == 2
    assert value(samples, "askq_timers_fired_total", kind="window") == 0
    assert ("askq_sweeper_lag_seconds", frozenset()) in samples


def test_without_the_extra_the_core_runs_and_metrics_port_is_one_line(
    backend: Backend, tmp_path: Path
) -> None:
    blocked = tmp_path / "prometheus_client.py"
    blocked.write_text("raise ImportError('prometheus_client is not installed (test)')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}"}
    refused = askq(backend, "worker", "auto", "--metrics-port", "0", **env)
    line = one_line_error(refused, "CONFIG_ERROR", 12)
    assert "pip install 'askq[metrics]'" in line
    refused = askq(backend, "sweeper", **env, ASKQ_METRICS_PORT="0")
    assert "askq[metrics]" in one_line_error(refused, "CONFIG_ERROR", 12)
    # Without --metrics-port the worker runs (and answers) with the module unimportable.
    proc = subprocess.Popen(
        [*ASKQ, "worker", "auto"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(**env),
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().endswith(": ready\n")
        answered = askq(backend, "ask", *QUESTION, **env)
        assert answered.returncode == 0, answered.stderr
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_a_metrics_setting_that_cannot_be_served_is_one_config_error_naming_it(
    backend: Backend,
) -> None:
    """Issue 22, item 14: a port out of range was `INTERNAL: unexpected OverflowError`
    (99999) or a resolver's error (-1), a bad ASKQ_METRICS_ADDR the resolver's or the
    kernel's words. Each is now one CONFIG_ERROR naming the setting, and the process
    stops (none of these may leave a worker running)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = str(taken.getsockname()[1])
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["worker", "auto", "--metrics-port", "99999"], {}, "--metrics-port 99999: not a port"),
        (["worker", "auto", "--metrics-port", "-1"], {}, "--metrics-port -1: not a port"),
        (["sweeper", "--metrics-port", "65536"], {}, "--metrics-port 65536: not a port"),
        # the same class: `askq mcp --http` said it served on port 99999, then hung
        (["mcp", "--http", "--port", "99999"], {}, "--port 99999: not a port"),
        (["sweeper", "--metrics-port", "0"], {"ASKQ_METRICS_ADDR": ""}, "ASKQ_METRICS_ADDR is"),
        # a name the resolver refuses (a label over 63 characters; no lookup is made)
        (
            ["worker", "auto", "--metrics-port", "0"],
            {"ASKQ_METRICS_ADDR": "h" * 64 + ".test"},
            'ASKQ_METRICS_ADDR "hhhh',
        ),
        # an address of another host (TEST-NET-1): the kernel refuses to bind it
        (
            ["sweeper", "--metrics-port", "0"],
            {"ASKQ_METRICS_ADDR": "192.0.2.1"},
            'ASKQ_METRICS_ADDR "192.0.2.1": not an address of this host',
        ),
        (
            ["worker", "auto", "--metrics-port", busy],
            {"ASKQ_METRICS_ADDR": "127.0.0.1"},
            f"--metrics-port {busy}: port {busy} on 127.0.0.1 is in use",
        ),
        (
            ["sweeper"],
            {"ASKQ_METRICS_PORT": busy, "ASKQ_METRICS_ADDR": "127.0.0.1"},
            f"ASKQ_METRICS_PORT {busy}: port {busy} on 127.0.0.1 is in use",
        ),
    ]
    try:
        for args, env, named in cases:
            refused = askq(backend, *args, **env)
            line = one_line_error(refused, "CONFIG_ERROR", 12)
            assert line.startswith(f"CONFIG_ERROR: {named}"), (args, env, line)
            assert "Errno" not in line and "bind()" not in line, line
    finally:
        taken.close()


def test_the_grafana_dashboard_uses_only_metrics_askq_exposes(backend: Backend) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from askq.observing._metrics import PrometheusRecorder, RedisCollector

    registry = CollectorRegistry()
    registry.register(RedisCollector(backend.settings()))
    recorder = PrometheusRecorder(registry)
    recorder.offered("g", 0)
    recorder.decided("g", "accepted", 0.001)
    recorder.settled("g", "answered", 1.0)
    recorder.passed_on("g", 0, "declined")
    recorder.reminded("g")
    recorder.sent("g", "slack", "ok")
    recorder.fired("remind", 0.01)
    recorder.recovered("callers_gone", 1)
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    exposed = {sample.name for family in families for sample in family.samples}
    exposed |= {family.name for family in families}  # a gauge with no series yet
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"askq_[a-z_]+", target["expr"])
    }
    assert used and used <= exposed, used - exposed
    assert "askq_pending_requests" in exposed and "askq_sweeper_lag_seconds" in exposed


async def test_sends_are_counted_per_group(seam: Seam, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two groups of one channel kind in one process: each group's sends are its own
    series (before: one series per kind, so whose sends failed could not be told)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from askq.observing._metrics import PrometheusRecorder
    from askq.protocol import _recorder

    class Pinger(MemoryAnswerer):
        kind = "pinger"
        uses_sends = True
        pinged: asyncio.Event

        async def ping(self) -> None:
            self.pinged.set()

    registry = CollectorRegistry()
    monkeypatch.setattr(_recorder, "recorder", PrometheusRecorder(registry))
    one, two = Pinger(), Pinger()
    async with running(seam, one, "one"), running(seam, two, "two"):
        for pinger, times in ((one, 1), (two, 2)):
            for _ in range(times):
                pinger.pinged = asyncio.Event()
                await pinger.group.send("ping")
                await asyncio.wait_for(pinger.pinged.wait(), 10)
    text = generate_latest(registry).decode()
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    sent = "askq_sends_total"
    assert value(samples, sent, group="one", channel="pinger", result="ok") == 1
    assert value(samples, sent, group="two", channel="pinger", result="ok") == 2
