"""An in-memory span sink for :class:`~orchestra.RecordingTracerProvider` (tests)."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from .._telemetry.spans import Record, to_readable

__all__ = ["InMemorySpanSink"]


class InMemorySpanSink:
    """Keeps finished spans; ``get_finished_spans()`` returns them as the SDK's ``ReadableSpan``.

    Pass it as ``RecordingTracerProvider(sink=InMemorySpanSink())``: the spans
    are the ones :func:`orchestra.configure_otlp`'s export process would send,
    built by the same conversion.
    """

    def __init__(self, *, resource: Resource | None = None) -> None:
        self.resource = resource if resource is not None else Resource.create({})
        self._records: list[Record] = []

    def add(self, record: Record) -> None:
        self._records.append(record)

    def get_finished_spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(to_readable(record, self.resource) for record in self._records)

    def clear(self) -> None:
        self._records.clear()

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        return True

    def shutdown(self, timeout_s: float = 30.0) -> None:
        pass
