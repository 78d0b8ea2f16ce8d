"""The OTLP export process: ``python -m orchestra._otlp_child --protocol P [--endpoint URL]``.

Reads pickled messages from stdin (its parent's
:class:`~orchestra._otlp_process.ExportProcess`, never anything else):

- ``("resource", attributes, schema_url)``: the resource of the spans that follow;
- ``("spans", [record, ...])``: export these: :func:`~orchestra._spans.to_readable`
  rebuilds each one, the SDK's batch processor and exporter send them, in
  requests of up to :data:`BATCH` spans, at most 20 ms after they arrive;
- ``("flush",)``: answer ``ok`` or ``failed`` on stdout: whether every export
  since the last flush succeeded, once all spans received are exported.

At end of input it shuts the exporter down and exits. SIGINT is ignored: the
parent decides when tracing ends. The standard ``OTEL_EXPORTER_OTLP_*``
variables (headers, timeout, certificates…) are read by the SDK's exporter here.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import signal
import sys
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ._exceptions import ConfigError
from ._spans import to_readable

__all__ = ["PROTOCOLS", "exporter_for", "main", "protocol_name"]

_log = logging.getLogger("orchestra.otlp")

BATCH = 512
"""Spans per export request."""
DELAY_MS = 20
"""Longest wait before spans received are exported."""
MAX_QUEUE = 65_536
"""Spans waiting for export; the SDK drops more (with a warning)."""
NICENESS = 10
"""Exporting yields the CPU to the runs it traces."""


PROTOCOLS = ("http/protobuf", "grpc")
"""OTLP protocols for traces (``http`` is taken for ``http/protobuf``)."""


def protocol_name(protocol: str) -> str:
    """``protocol`` as one of :data:`PROTOCOLS`; :class:`ConfigError` if it is none of them."""
    name = "http/protobuf" if protocol == "http" else protocol
    if name not in PROTOCOLS:
        raise ConfigError(f"unknown OTLP protocol {protocol!r}: use 'http/protobuf' or 'grpc'")
    return name


def exporter_for(protocol: str, endpoint: str | None) -> SpanExporter:
    """The SDK's OTLP span exporter for ``protocol`` (see :func:`protocol_name`)."""
    if protocol_name(protocol) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(endpoint=endpoint, insecure=True) if endpoint else Grpc()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return Http(endpoint=endpoint) if endpoint else Http()


class _Checked(SpanExporter):
    """The exporter, remembering whether an export failed since the last :meth:`checked`."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._failed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        self._failed = self._failed or result is not SpanExportResult.SUCCESS
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def checked(self) -> bool:
        ok, self._failed = not self._failed, False
        return ok


def serve(exporter: SpanExporter, source: Any, answers: Any) -> None:
    """Export what ``source`` sends until it ends (see the module docstring)."""
    checked = _Checked(exporter)
    batches = BatchSpanProcessor(
        checked,
        max_queue_size=MAX_QUEUE,
        max_export_batch_size=BATCH,
        schedule_delay_millis=DELAY_MS,
    )
    resource = Resource.create({})
    while True:
        try:
            message = pickle.load(source)
        except EOFError:
            break
        if message[0] == "resource":
            resource = Resource(message[1], message[2])
        elif message[0] == "spans":
            for record in message[1]:
                _export_one(batches, record, resource)
        elif message[0] == "flush":
            flushed = batches.force_flush()
            answers.write(b"ok\n" if flushed and checked.checked() else b"failed\n")
            answers.flush()
    batches.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK


def _export_one(batches: BatchSpanProcessor, record: Any, resource: Resource) -> None:
    """Hand one record to the batch processor; one malformed record is logged and skipped."""
    try:
        span = to_readable(record, resource)
    except Exception:  # a record is data from the parent: a bad one must not end the export
        _log.exception("a span record could not be read; it is skipped")
        return
    batches.on_end(span)


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "nice"):
        os.nice(NICENESS)
    parser = argparse.ArgumentParser(prog="orchestra._otlp_child")
    parser.add_argument("--protocol", default="http/protobuf")
    parser.add_argument("--endpoint", default=None)
    args = parser.parse_args(argv)
    serve(exporter_for(args.protocol, args.endpoint), sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
