"""OpenTelemetry traces (the 'otel' extra): a span from `ask` to its settlement, and the
answerer's spans joined to the agent's trace.

    agent's span (whatever is current when it asks; `askq ask`: TRACEPARENT)
      askq.ask                      caller: publish -> settlement; askq.request_id
        askq.offer                  a replica's handling of the offer (decide, claim)
          askq.present              the channel shows it
            askq.send <job>         a retried send (a Slack post), in whichever replica
        askq.answer                 a group's answer landing (a human's click; a
                                    rule's answer, inside its askq.offer)

The link across processes is the request itself: `AskRequest.trace` holds the W3C
`traceparent` of the `askq.ask` span, and the worker starts its spans under it; a send
carries the traceparent of the span that queued it.

Without the extra nothing here imports OpenTelemetry: `ENABLED` is False and every
helper returns a shared no-op context. With it, spans go to whatever tracer provider
the process configured (none: OpenTelemetry's own no-op). The `askq` commands
configure one from the standard OTEL_* variables (`configure_from_environment`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

from ._errors import AskError, ErrorCode


def _installed() -> bool:
    """Whether OpenTelemetry is there, without importing it."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):  # ValueError: blocked (sys.modules entry None)
        return False


ENABLED = _installed()
_NULL: contextlib.nullcontext[None] = contextlib.nullcontext()
_TRACEPARENT = "traceparent"


def _api() -> Any:
    from opentelemetry import trace

    return trace


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (None: no valid one, or no extra)."""
    if not ENABLED:
        return None
    carrier: dict[str, str] = {}
    _propagator().inject(carrier)
    return carrier.get(_TRACEPARENT)


class AskSpan:
    """`askq.ask`: entered before the request is built (its traceparent goes into it),
    left at settlement; an AskError is recorded as the span's error, with its code."""

    def __init__(self, agent_id: str, turn_id: str) -> None:
        self._attributes = {"askq.agent": agent_id, "askq.turn": turn_id}
        self._cm: Any = None
        self.span: Any = None

    def __enter__(self) -> AskSpan:
        trace = _api()
        tracer = trace.get_tracer("askq")
        self._cm = tracer.start_as_current_span(
            "askq.ask",
            kind=trace.SpanKind.CLIENT,
            attributes=self._attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self.span = self._cm.__enter__()
        return self

    @property
    def traceparent(self) -> str | None:
        return current_traceparent()

    def request(self, request_id: str) -> None:
        self.span.set_attribute("askq.request_id", request_id)

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        trace = _api()
        if isinstance(exc, AskError):
            self.span.set_attribute("askq.outcome", exc.code.value)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, exc.code.value))
        elif exc is None:
            self.span.set_attribute("askq.outcome", "ANSWERED")
        elif isinstance(exc, Exception):
            self.span.record_exception(exc)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        self._cm.__exit__(kind, exc, tb)


def ask_span(agent_id: str, turn_id: str) -> AskSpan | contextlib.nullcontext[None]:
    return AskSpan(agent_id, turn_id) if ENABLED and not _inert() else _NULL


def _inert() -> bool:
    """No tracer provider is configured and there is no trace to continue: the span
    would be OpenTelemetry's no-op, recording nothing and carrying no traceparent, so
    none is made (entering and leaving it cost a caller 15-25 µs of CPU per ask when the
    extra is merely installed). A provider set later is seen at the next ask."""
    trace = _api()
    if not isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    ):
        return False
    return not trace.get_current_span().get_span_context().is_valid


@contextlib.contextmanager
def _joined(name: str, traceparent: str, attributes: dict[str, Any]) -> Iterator[None]:
    trace = _api()
    parent = _propagator().extract({_TRACEPARENT: traceparent})
    current = trace.get_current_span().get_span_context()
    if (
        current.is_valid
        and current.trace_id == trace.get_current_span(parent).get_span_context().trace_id
    ):
        parent = None  # already inside this trace (present within its offer): nest there
    with trace.get_tracer("askq").start_as_current_span(
        name, context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ):
        yield


def joined(
    name: str, traceparent: str | None, **attributes: Any
) -> contextlib.AbstractContextManager[None]:
    """A span of the answering side under the request's (or a send's) traceparent;
    nothing without the extra or without a traceparent."""
    if not ENABLED or not traceparent:
        return _NULL
    return _joined(name, traceparent, {f"askq.{k}": v for k, v in attributes.items()})


def environment_context() -> contextlib.AbstractContextManager[Any]:
    """For `askq ask`: the TRACEPARENT environment variable as the current context, so
    a script that traces (`TRACEPARENT=00-... askq ask ...`) gets the ask in its trace."""
    traceparent = os.environ.get("TRACEPARENT")
    if not ENABLED or not traceparent:
        return _NULL
    from opentelemetry import context

    @contextlib.contextmanager
    def attached() -> Iterator[None]:
        token = context.attach(_propagator().extract({_TRACEPARENT: traceparent}))
        try:
            yield
        finally:
            context.detach(token)

    return attached()


# --- the askq commands: the SDK configured from the OTEL_* variables ------------------

_SIGNALS = {
    "traces": ("OTEL_TRACES_EXPORTER", "opentelemetry_traces_exporter"),
    "metrics": ("OTEL_METRICS_EXPORTER", "opentelemetry_metrics_exporter"),
    "logs": ("OTEL_LOGS_EXPORTER", "opentelemetry_logs_exporter"),
}
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
_OTLP_NAMES = ("otlp", "otlp_proto_http", "otlp_proto_grpc")


def _names(variable: str) -> list[str]:
    value = os.environ.get(variable, "")
    names = [name.strip() for name in value.split(",") if name.strip()]
    return [] if [n.lower() for n in names] == ["none"] else names


def _installed_exporters(group: str) -> list[str]:
    from importlib.metadata import entry_points

    return sorted({entry.name for entry in entry_points(group=group)})


def configure_from_environment() -> bool:
    """For the `askq` commands (they have no code of the user's to configure a tracer
    provider in): OpenTelemetry's SDK set up from the standard variables, as
    `opentelemetry-instrument` does, through opentelemetry-distro's configurator:
    OTEL_TRACES_EXPORTER (otlp, console, ...; the metrics and logs ones too),
    OTEL_EXPORTER_OTLP_ENDPOINT and the exporter's other settings, OTEL_SERVICE_NAME
    and OTEL_RESOURCE_ATTRIBUTES (default service name: askq), OTEL_TRACES_SAMPLER.

    Nothing is set up (or imported) unless an exporter is named or an OTLP endpoint
    given (an endpoint alone means OTLP traces); OTEL_SDK_DISABLED=true turns it off.
    `otlp` is OTLP over HTTP (the extra's exporter) unless OTEL_EXPORTER_OTLP_PROTOCOL
    says otherwise or the gRPC exporter is installed (the SDK's own default). The
    console exporters write to stderr, never stdout: `askq ask` prints its answers
    there, and `askq mcp` and the Claude Code hook speak their protocol on it.
    Returns whether it set anything up; a setting it cannot follow is a CONFIG_ERROR
    naming the variable."""
    if not ENABLED or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    wanted = {signal: _names(variable) for signal, (variable, _) in _SIGNALS.items()}
    endpoint = next((v for v in _ENDPOINTS if os.environ.get(v, "").strip()), None)
    if not wanted["traces"] and endpoint and "OTEL_TRACES_EXPORTER" not in os.environ:
        wanted["traces"] = ["otlp"]  # an OTLP endpoint and no exporter named: OTLP
        os.environ["OTEL_TRACES_EXPORTER"] = "otlp"  # as opentelemetry-distro's defaults do
    if not any(wanted.values()):
        return False
    try:
        from opentelemetry.distro import OpenTelemetryConfigurator
    except ImportError as exc:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"OTEL_* exporters are set, but OpenTelemetry's SDK configuration is not"
            f" installed ({exc.name or exc}); run: pip install 'askq[otel]'",
        ) from None
    if any(name in _OTLP_NAMES for names in wanted.values() for name in names):
        grpc = "otlp_proto_grpc" in _installed_exporters("opentelemetry_traces_exporter")
        if not grpc and not any(os.environ.get(v, "").strip() for v in _PROTOCOLS):
            os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"  # the spec's default
    to_stderr: dict[type, dict[str, Any]] = {}
    for signal, names in wanted.items():
        variable, group = _SIGNALS[signal]
        installed = _installed_exporters(group)
        for name in names:
            if name not in installed and name != "otlp":
                raise AskError(
                    ErrorCode.CONFIG_ERROR,
                    f"{variable}: no exporter named {name!r} is installed (installed:"
                    f" {', '.join(installed) or 'none'}; 'otlp' is OTLP, pip install"
                    " 'askq[otel]')",
                )
            if name == "console":
                from importlib.metadata import entry_points

                [console] = entry_points(group=group, name="console")
                to_stderr[console.load()] = {"out": sys.stderr}
    options: dict[str, Any] = {"exporter_args_map": to_stderr}
    if not os.environ.get("OTEL_SERVICE_NAME", "").strip() and "service.name=" not in (
        os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    ):
        options["resource_attributes"] = {"service.name": "askq"}
    try:
        OpenTelemetryConfigurator().configure(**options)  # type: ignore[no-untyped-call]
    except Exception as exc:  # noqa: BLE001 - the SDK's words, under the setting's name
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"OpenTelemetry could not be set up from the OTEL_* variables:"
            f" {type(exc).__name__}: {exc}",
        ) from None
    return True


def flush_traces() -> None:
    """Export what the configured provider holds (before an exit that skips atexit)."""
    if not ENABLED:
        return
    force_flush = getattr(_api().get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush()
