"""Traces from the `askq` commands (issue 22, item 16), configured by the standard
OpenTelemetry variables alone: `askq ask` answered by `askq worker auto`, both
exporting OTLP/HTTP to a receiver on loopback (a small HTTP server decoding the
protobuf requests with opentelemetry-proto), one trace from the ask to its answer,
each process under its service name. `OTEL_TRACES_EXPORTER=console` writes spans to
stderr, never onto the answers `askq ask` prints; an exporter that is not installed is
one CONFIG_ERROR naming the variable."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import Backend
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from test_cli_errors import one_line_error
from test_processes import ASKQ, askq

QUESTION = ["-q", "Deploy now?", "-o", "Yes (Recommended)", "-o", "No"]
ANSWER = '{"answers":[{"id":"q1","selected":["Yes (Recommended)"]}]}\n'


@dataclass(frozen=True)
class Received:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, str]


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf in, protobuf out."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.took(self.path, self.headers.get("Content-Type", ""), request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def took(self, path: str, content_type: str, request: ExportTraceServiceRequest) -> None:
        assert content_type == "application/x-protobuf", content_type
        with self.lock:
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            Received(
                                service=resource.get("service.name", ""),
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes={a.key: a.value.string_value for a in span.attributes},
                            )
                        )

    def named(self, name: str) -> list[Received]:
        with self.lock:
            return [span for span in self.spans if span.name == name]


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


@dataclass
class Worker:
    """An `askq worker auto` process; its exit status and output once stopped."""

    proc: subprocess.Popen[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


@contextmanager
def auto_worker(backend: Backend, **env: str) -> Iterator[Worker]:
    proc = subprocess.Popen(
        [*ASKQ, "worker", "auto"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=backend.env(**env),
    )
    worker = Worker(proc)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.endswith(": ready\n"), line + proc.stderr.read()
        yield worker
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # a clean stop exports what it holds
        worker.stdout, worker.stderr = proc.communicate(timeout=30)
        worker.returncode = proc.returncode


def test_ask_and_worker_export_one_trace_over_otlp(backend: Backend) -> None:
    with receiving() as receiver:
        worker_env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "askq-worker-auto",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with auto_worker(backend, **worker_env) as worker:
            # the caller names only the endpoint and its service: OTLP over HTTP
            asked = askq(
                backend,
                "ask",
                *QUESTION,
                OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                OTEL_SERVICE_NAME="deploy-script",
            )
            assert (asked.returncode, asked.stdout) == (0, ANSWER), asked.stderr
            assert asked.stderr == ""
            [ask] = receiver.named("askq.ask")  # exported before `askq ask` exited
            deadline = time.monotonic() + 20
            while not receiver.named("askq.answer") and time.monotonic() < deadline:
                time.sleep(0.05)
        assert worker.returncode == 0, worker.stderr
    assert (ask.service, ask.parent_span_id) == ("deploy-script", "")
    assert ask.attributes["askq.outcome"] == "ANSWERED"
    [offer] = receiver.named("askq.offer")
    [answer] = receiver.named("askq.answer")
    assert {offer.service, answer.service} == {"askq-worker-auto"}
    # one trace: ask -> the worker's offer -> the answer it gave
    assert offer.trace_id == answer.trace_id == ask.trace_id
    assert offer.parent_span_id == ask.span_id
    assert answer.parent_span_id == offer.span_id
    assert answer.attributes["askq.request_id"] == ask.attributes["askq.request_id"]
    assert answer.attributes["askq.by"].startswith("auto")
    assert set(receiver.paths) == {"/v1/traces"}


def test_console_spans_go_to_stderr_never_onto_the_answers(backend: Backend) -> None:
    with auto_worker(backend, OTEL_TRACES_EXPORTER="console") as worker:
        asked = askq(backend, "ask", *QUESTION, OTEL_TRACES_EXPORTER="console")
        assert (asked.returncode, asked.stdout) == (0, ANSWER), asked.stderr
        # stderr holds the span, as the console exporter writes it (one JSON object)
        span = json.loads(asked.stderr)
        assert (
            span["name"] == "askq.ask" and span["resource"]["attributes"]["service.name"] == "askq"
        ), span
    assert worker.returncode == 0 and worker.stdout == "", worker.stdout
    assert '"name": "askq.offer"' in worker.stderr and '"name": "askq.answer"' in worker.stderr


def test_an_exporter_that_is_not_installed_is_one_config_error(backend: Backend) -> None:
    refused = askq(backend, "ask", *QUESTION, OTEL_TRACES_EXPORTER="zipkin_json")
    line = one_line_error(refused, "CONFIG_ERROR", 12)
    assert line.startswith("CONFIG_ERROR: OTEL_TRACES_EXPORTER: no exporter named 'zipkin_json'")
    assert "console" in line and "otlp_proto_http" in line, line
    # "none" (or nothing set) configures nothing, as the SDK reads it
    quiet = askq(backend, "status", "--json", OTEL_TRACES_EXPORTER="none")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
