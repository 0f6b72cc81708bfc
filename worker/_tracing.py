"""OpenTelemetry traces (the 'otel' extra): a span from `ask` to its settlement, and the
answerer's spans joined to the agent's trace.

    agent's span (whatever is current when it asks; `askq ask`: TRACEPARENT)
      askq.ask                      caller: publish -> settlement; askq.request_id
        askq.offer                  a replica's handling of the offer (decide, claim)
          askq.present              the channel shows it
            askq.send <job>         a retried send (a Slack post), in whichever replica
        askq.answer                 a group's answer landing (a human's click)

The link across processes is the request itself: `AskRequest.trace` holds the W3C
`traceparent` of the `askq.ask` span, and the worker starts its spans under it; a send
carries the traceparent of the span that queued it.

Without the extra nothing here imports OpenTelemetry: `ENABLED` is False and every
helper returns a shared no-op context. With it, spans go to whatever tracer provider
the process configured (none: OpenTelemetry's own no-op).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

from ._errors import AskError


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
