"""The recording tracer: spans as plain records, following the OpenTelemetry API's rules."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, StatusCode

from orchestra import RecordingTracerProvider
from orchestra.testing import InMemorySpanSink


@pytest.fixture
def sink() -> InMemorySpanSink:
    return InMemorySpanSink()


@pytest.fixture
def tracer(sink: InMemorySpanSink) -> trace.Tracer:
    return RecordingTracerProvider(sink=sink).get_tracer("test-scope", "1.2")


def test_a_child_shares_its_parents_trace_and_points_at_it(tracer, sink):
    parent = tracer.start_span("parent", kind=SpanKind.SERVER, attributes={"a": 1})
    child = tracer.start_span("child", context=trace.set_span_in_context(parent))
    child.end()
    parent.end()
    got_child, got_parent = sink.get_finished_spans()
    assert got_child.context.trace_id == got_parent.context.trace_id
    assert got_child.parent.span_id == got_parent.context.span_id
    assert got_parent.parent is None and got_parent.kind is SpanKind.SERVER
    assert got_parent.attributes == {"a": 1}
    assert got_parent.instrumentation_scope.name == "test-scope"
    assert got_parent.instrumentation_scope.version == "1.2"
    assert got_parent.start_time <= got_parent.end_time


def test_unrelated_spans_get_their_own_traces(tracer, sink):
    tracer.start_span("one").end()
    tracer.start_span("two").end()
    one, two = sink.get_finished_spans()
    assert one.context.trace_id != two.context.trace_id
    assert one.context.span_id != two.context.span_id


def test_a_span_ends_once_and_changes_nothing_after(tracer, sink):
    span = tracer.start_span("s", attributes={"kept": True})
    span.end()
    span.set_attribute("late", 1)
    span.add_event("late")
    span.end()
    (only,) = sink.get_finished_spans()
    assert dict(only.attributes) == {"kept": True} and only.events == ()
    assert not span.is_recording()


def test_status_follows_the_spec_unset_is_ignored_and_ok_is_final(tracer, sink):
    failing = tracer.start_span("failing")
    failing.set_status(StatusCode.ERROR, "boom")
    failing.set_status(StatusCode.UNSET)
    failing.end()
    fine = tracer.start_span("fine")
    fine.set_status(StatusCode.OK, "ignored for OK")
    fine.set_status(StatusCode.ERROR, "too late")
    fine.end()
    failed, ok = sink.get_finished_spans()
    assert (failed.status.status_code, failed.status.description) == (StatusCode.ERROR, "boom")
    assert (ok.status.status_code, ok.status.description) == (StatusCode.OK, None)


def test_events_links_and_exceptions_are_recorded(tracer, sink):
    other = tracer.start_span("other")
    span = tracer.start_span("s", links=[Link(other.get_span_context(), {"why": "retry"})])
    span.add_event("progress", {"done": 3})
    span.record_exception(ValueError("bad input"))
    span.end()
    (got,) = sink.get_finished_spans()
    assert [e.name for e in got.events] == ["progress", "exception"]
    assert got.events[1].attributes["exception.type"] == "ValueError"
    assert got.events[1].attributes["exception.message"] == "bad input"
    assert got.links[0].context.span_id == other.get_span_context().span_id
    assert dict(got.links[0].attributes) == {"why": "retry"}


def test_start_as_current_span_makes_it_current_and_ends_it(tracer, sink):
    with tracer.start_as_current_span("outer") as outer:
        assert trace.get_current_span() is outer
        tracer.start_span("inner").end()  # parent taken from the current context
    inner, got_outer = sink.get_finished_spans()
    assert inner.parent.span_id == got_outer.context.span_id
    assert trace.get_current_span() is not outer
