"""A lean OpenTelemetry tracer: spans recorded as plain data, handed to a sink.

Why not the SDK's ``TracerProvider`` for orchestra's own OTLP export: on this
project's benchmark the SDK spends about 45 µs recording a span (each
attribute validated under a lock) and 50–70 µs encoding it, all under the GIL
that the run loop needs. Here a span is recorded in a few microseconds as
builtins only (:data:`Record`), and a :class:`SpanSink` takes it when it ends:
:class:`~orchestra._telemetry.otlp_process.ExportProcess` ships batches to a child
process that validates the attributes and exports them with the SDK's own
OTLP exporters (:func:`to_readable` rebuilds the SDK's ``ReadableSpan``), so
the backend receives what the SDK would have sent.

Semantics that differ from the SDK: every span is recorded and sampled (no
sampler; pass an SDK ``TracerProvider`` to :class:`~orchestra.OTelTracer` for
sampling or custom processors); attribute values are checked by the exporting
side, where invalid ones are dropped with a warning.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from random import getrandbits
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

if TYPE_CHECKING:  # the SDK is for the exporting side (to_readable) only
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["RecordingTracerProvider", "SpanSink", "to_readable"]

Record = tuple[Any, ...]
"""A finished span as builtins (picklable without importing orchestra):
``(name, kind, trace_id, span_id, parent_span_id | None, parent_is_remote,
start_ns, end_ns, attributes, events, links, status_code, status_description,
scope)`` with ``events`` a list of ``(name, time_ns, attributes)``, ``links`` a
list of ``(trace_id, span_id, trace_flags, attributes)`` and ``scope`` a
``(name, version, schema_url)`` triple (empty strings for none)."""

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_KIND_VALUES = {kind: kind.value for kind in SpanKind}  # enum .value is slow on the hot path
_STATUS_VALUES = {code: code.value for code in StatusCode}
_MAX_ATTRIBUTES = 128


class SpanSink(Protocol):
    """Where finished spans go. ``add`` runs on the thread that ended the span: keep it short."""

    def add(self, record: Record) -> None: ...

    def force_flush(self, timeout_s: float) -> bool: ...

    def shutdown(self, timeout_s: float) -> None: ...


class RecordingTracerProvider(trace.TracerProvider):
    """An OpenTelemetry ``TracerProvider`` whose spans are plain records sent to ``sink``.

    The resource the spans are exported with is the sink's. ``force_flush``
    returns True only if the sink says every span ended before the call was
    exported; ``shutdown`` stops the sink, which first sends what it holds.
    Both block: call them off the trio thread (see :func:`orchestra.flush_spans`).
    """

    def __init__(self, *, sink: SpanSink) -> None:
        self.sink = sink
        self._stopped = False

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        scope = (instrumenting_module_name, instrumenting_library_version or "", schema_url or "")
        return _Tracer(self.sink, scope)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.sink.force_flush(timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        if not self._stopped:
            self._stopped = True
            self.sink.shutdown(timeout_millis / 1000)


class _Tracer(trace.Tracer):
    def __init__(self, sink: SpanSink, scope: tuple[str, str, str]) -> None:
        self._sink = sink
        self._scope = scope

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is not None and not parent.is_valid:
            parent = None
        trace_id = parent.trace_id if parent is not None else _new_id(128)
        own = SpanContext(trace_id, _new_id(64), is_remote=False, trace_flags=_SAMPLED)
        return RecordedSpan(
            name,
            own,
            parent,
            kind,
            dict(attributes) if attributes else {},
            [(link.context, dict(link.attributes or {})) for link in links] if links else [],
            start_time or time.time_ns(),
            self,
        )

    def start_as_current_span(  # type: ignore[override]  # same context manager, plainer type
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> AbstractContextManager[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        return trace.use_span(span, end_on_exit, record_exception, set_status_on_exception)

    def finish(self, span: RecordedSpan, end_ns: int) -> None:
        self._sink.add(span.record(end_ns, self._scope))


def _new_id(bits: int) -> int:
    return getrandbits(bits) or _new_id(bits)  # zero is the invalid id


class RecordedSpan(trace.Span):
    """One span being recorded; the sink gets its :data:`Record` when it ends."""

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: list[tuple[SpanContext, dict[str, Any]]],
        start_ns: int,
        tracer: _Tracer,
    ) -> None:
        self._name = name
        self._context = context
        self._ids = (
            context.trace_id,
            context.span_id,
            parent.span_id if parent is not None else None,
            parent.is_remote if parent is not None else False,
        )
        self._kind = kind
        self._attributes = attributes
        self._events: list[tuple[str, int, dict[str, Any]]] = []
        self._links = links
        self._start = start_ns
        self._status: tuple[StatusCode, str | None] = (StatusCode.UNSET, None)
        self._tracer: _Tracer | None = tracer

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._tracer is not None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._tracer is not None:
            self._attributes.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        if self._tracer is not None:
            self._attributes[key] = value

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        if self._tracer is not None:
            self._events.append((name, timestamp or time.time_ns(), dict(attributes or {})))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        if self._tracer is not None and context.is_valid:
            self._links.append((context, dict(attributes or {})))

    def update_name(self, name: str) -> None:
        if self._tracer is not None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        code = status.status_code if isinstance(status, Status) else status
        if isinstance(status, Status):
            description = status.description
        if self._tracer is None or code is StatusCode.UNSET or self._status[0] is StatusCode.OK:
            return  # as the spec says: UNSET is ignored, OK is final
        self._status = (code, description if code is StatusCode.ERROR else None)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        details = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        self.add_event("exception", {**details, **(attributes or {})}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        tracer, self._tracer = self._tracer, None
        if tracer is not None:  # ending twice is a no-op, as in the SDK
            tracer.finish(self, end_time or time.time_ns())

    def record(self, end_ns: int, scope: tuple[str, str, str]) -> Record:
        return (
            self._name,
            _KIND_VALUES[self._kind],
            *self._ids,
            self._start,
            end_ns,
            self._attributes,
            self._events,
            [(c.trace_id, c.span_id, int(c.trace_flags), a) for c, a in self._links],
            _STATUS_VALUES[self._status[0]],
            self._status[1],
            scope,
        )


def to_readable(record: Record, resource: Resource) -> ReadableSpan:
    """The SDK's ``ReadableSpan`` for ``record``, with its attributes validated by the SDK."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    (name, kind, trace_id, span_id, parent_id, remote, start, end) = record[:8]
    (attributes, events, links, code, description, scope) = record[8:]
    context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)
    parent = None
    if parent_id is not None:
        parent = SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=_SAMPLED)
    return ReadableSpan(
        name=name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=_bounded(attributes),
        events=[Event(n, _bounded(a), t) for n, t, a in events],
        links=[Link(SpanContext(t, s, True, TraceFlags(f)), _bounded(a)) for t, s, f, a in links],
        kind=SpanKind(kind),
        status=Status(StatusCode(code), description),
        start_time=start,
        end_time=end,
        instrumentation_scope=InstrumentationScope(scope[0], scope[1] or None, scope[2] or None),
    )


def _bounded(attributes: Mapping[str, Any]) -> BoundedAttributes:
    return BoundedAttributes(_MAX_ATTRIBUTES, attributes, immutable=True)
