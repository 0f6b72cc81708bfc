"""OpenTelemetry traces (issue 15, item 5), exported in memory: the agent's span is the
parent of `askq.ask`, and the answering side's spans (offer, present, answer, a send)
are in the same trace, joined through the traceparent the request carries, in this
process and from an `askq ask` subprocess given TRACEPARENT."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Backend, running
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_processes import ASKQ

from askq import Answerer, AnswererOptions, AskError, Caller, Offer, Seam
from askq.answerers.memory import MemoryAnswerer

EXPORTER = InMemorySpanExporter()
QUESTION = {
    "questions": [
        {
            "id": "go",
            "header": "Deploy",
            "question": "Deploy now?",
            "options": [{"label": "Yes (Recommended)"}, {"label": "No"}],
        }
    ]
}
YES = [{"id": "go", "selected": ["Yes (Recommended)"]}]


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """One tracer provider for the process (OpenTelemetry allows setting it once)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(tracer_provider)


@pytest.fixture(autouse=True)
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def by_name(finished: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in finished}


class Poster(Answerer[AnswererOptions]):
    """Presents by a retried send (as Slack posts), which then answers."""

    kind = "poster"
    uses_sends = True

    async def present(self, offer: Offer) -> None:
        await self.group.send("post", request_id=offer.request_id)

    async def post(self, request_id: str) -> None:
        await self.group.answer(request_id, YES, by="poster:bob")


async def test_the_answerers_spans_join_the_agents_trace(backend: Backend, seam: Seam) -> None:
    tracer = trace.get_tracer("agent")
    async with running(seam, Poster(), "desk"):
        with tracer.start_as_current_span("agent.turn") as agent:
            answers = await seam.ask(QUESTION, Caller(agent_id="a1", turn_id="t1"))
        assert answers.answers[0].selected == ["Yes (Recommended)"]
        for _ in range(100):  # the send's span ends after the answer it gave
            if "askq.send post" in by_name(EXPORTER.get_finished_spans()):
                break
            await asyncio.sleep(0.05)
    found = by_name(EXPORTER.get_finished_spans())
    trace_id = agent.get_span_context().trace_id
    for name in ("askq.ask", "askq.offer", "askq.present", "askq.send post", "askq.answer"):
        assert name in found, sorted(found)
        assert found[name].context.trace_id == trace_id, name
    ask, offer = found["askq.ask"], found["askq.offer"]
    assert ask.parent is not None and ask.parent.span_id == agent.get_span_context().span_id
    assert offer.parent is not None and offer.parent.span_id == ask.context.span_id
    present = found["askq.present"]
    assert present.parent is not None and present.parent.span_id == offer.context.span_id
    send = found["askq.send post"]
    assert send.parent is not None and send.parent.span_id == present.context.span_id
    assert send.attributes is not None and send.attributes["askq.group"] == "desk"
    answer = found["askq.answer"]
    assert answer.parent is not None and answer.parent.span_id == send.context.span_id
    assert ask.attributes is not None and ask.attributes["askq.outcome"] == "ANSWERED"
    request_id = ask.attributes["askq.request_id"]
    assert offer.attributes is not None and offer.attributes["askq.request_id"] == request_id
    assert answer.attributes is not None and answer.attributes["askq.by"] == "poster:bob"


async def test_a_failed_ask_is_an_error_span_with_its_code(seam: Seam) -> None:
    with pytest.raises(AskError):
        await seam.ask(QUESTION, Caller(agent_id="a1", turn_id="t2"))
    ask = by_name(EXPORTER.get_finished_spans())["askq.ask"]
    assert ask.attributes is not None and ask.attributes["askq.outcome"] == "NO_ANSWERER"
    assert ask.status.status_code is trace.StatusCode.ERROR


async def test_askq_ask_joins_the_trace_in_traceparent(backend: Backend, seam: Seam) -> None:
    """A script that traces hands `askq ask` its context (TRACEPARENT); the answering
    side (here, this process) starts its spans in that trace."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    memory = MemoryAnswerer(reply=lambda offer: [{"id": "q1", "selected": ["Yes"]}])
    async with running(seam, memory, "desk"):
        result = await asyncio.to_thread(
            subprocess.run,
            [*ASKQ, "ask", "-q", "Deploy?", "-o", "Yes", "-o", "No"],
            capture_output=True,
            text=True,
            env=backend.env(TRACEPARENT=f"00-{trace_id}-00f067aa0ba902b7-01"),
        )
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = by_name(EXPORTER.get_finished_spans())
    assert found["askq.offer"].context.trace_id == int(trace_id, 16)
    assert found["askq.answer"].context.trace_id == int(trace_id, 16)


def test_without_the_extra_nothing_is_imported_and_asks_work() -> None:
    """OpenTelemetry made unimportable: askq asks (here: NO_ANSWERER on an embedded
    Redis) without importing any of it."""
    script = """
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the extra were not installed
from fakeredis import FakeAsyncRedis
from askq import AskError, Caller, Seam
from askq.protocol import _tracing
async def main():
    async with Seam(redis=FakeAsyncRedis(decode_responses=True)) as seam:
        try:
            await seam.ask({"questions": [{"id": "q", "header": "H", "question": "Q?"}]},
                           Caller(agent_id="a", turn_id="t"))
        except AskError as exc:
            print(exc.code.value)

asyncio.run(main())
assert _tracing.ENABLED is False
print(sorted(m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m]))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["NO_ANSWERER", "[]"]


def test_no_span_is_made_when_no_provider_is_set_and_no_trace_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The extra installed but never configured: `ask_span` is the shared no-op (what
    OpenTelemetry's no-op span would have recorded and carried: nothing)."""
    from askq.protocol import _tracing
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    with _tracing.ask_span("a", "t") as span:
        assert span is None
    # A trace to continue (an agent's context from TRACEPARENT) still gets its span, so
    # its traceparent travels in the request as before.
    parent = trace.SpanContext(
        trace_id=0x1234, span_id=0x99, is_remote=True, trace_flags=trace.TraceFlags(1)
    )
    with trace.use_span(trace.NonRecordingSpan(parent)):
        with _tracing.ask_span("a", "t") as made:
            assert made is not None
            assert made.traceparent is not None and f"{0x1234:032x}" in made.traceparent
    monkeypatch.undo()
    with _tracing.ask_span("a", "t") as configured:  # the module's provider: a real span
        assert configured is not None
