"""The OTLP export process, started by :class:`~orchestra._telemetry.otlp_process.ExportProcess`.

Its command line is ``python -c "from orchestra._telemetry.otlp_child import main; main()"
--protocol P [--endpoint URL]``: ``-c`` rather than ``-m orchestra._telemetry.otlp_child``,
which would warn if the package had already imported this module. It reads
pickled messages from stdin (its parent's ``ExportProcess``, never anything else):

- ``("resource", attributes, schema_url)``: the resource of the spans that follow;
- ``("spans", [record, ...])``: export these: :func:`~orchestra._telemetry.spans.to_readable`
  rebuilds each one, the SDK's batch processor and exporter send them, in
  requests of up to :data:`BATCH` spans, at most 20 ms after they arrive;
- ``("flush", timeout_s)``: answer one line on stdout within ``timeout_s``:
  ``ok`` if every export since the last flush succeeded once all spans
  received are exported, else ``failed <why>`` (say, ``no OTLP collector at
  URL (connection refused)``);
- ``("end", grace_s)``: at the end of input, give the exporter ``grace_s`` to
  send what is left, then stop its retries (the rest is dropped), answer as
  to a flush and exit.

The exporter's own log lines (each retry, each failed batch) are kept, not
printed: a failure is answered to the next flush and the parent says it once.
SIGINT is ignored: the parent decides when tracing ends. The standard
``OTEL_EXPORTER_OTLP_*`` variables (headers, timeout, certificates…) are read
by the SDK's exporter here.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .otlp_protocol import protocol_name
from .spans import to_readable

__all__ = ["exporter_for", "main", "serve"]

_log = logging.getLogger("orchestra.otlp")

BATCH = 512
"""Spans per export request."""
DELAY_MS = 20
"""Longest wait before spans received are exported."""
MAX_QUEUE = 65_536
"""Spans waiting for export; the SDK drops more (with a warning)."""
NICENESS = 10
"""Exporting yields the CPU to the runs it traces."""
END_GRACE_S = 30.0
"""How long the exporter may send what is left at the end, unless the parent says."""
PROBE_S = 1.0
"""How long the check for a listening collector (after a failed export) waits to connect."""
POLL_S = 0.05
"""How often a flush looks at whether the exporter has complained."""
ABORT_S = 1.0
"""How long the end waits once the exporter's retries are stopped."""


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
        self._stopped = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        self._failed = self._failed or result is not SpanExportResult.SUCCESS
        return result

    def shutdown(self) -> None:
        """Stop the exporter: an export retrying gives up, later ones fail at once."""
        if not self._stopped:  # maybe early (see serve), then by the batch processor
            self._stopped = True
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def checked(self) -> bool:
        ok, self._failed = not self._failed, False
        return ok


class _Complaints(logging.Handler):
    """The exporter's warnings (each retry, each failed batch), counted, not printed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.latest: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.latest = record.getMessage().split("\n", 1)[0][:300]

    @classmethod
    def install(cls) -> _Complaints:
        handler = cls()
        logger = logging.getLogger("opentelemetry.exporter")
        logger.addHandler(handler)
        logger.propagate = False
        return handler


def serve(exporter: SpanExporter, source: Any, answers: Any) -> None:
    """Export what ``source`` sends until it ends (see the module docstring)."""
    complaints = _Complaints.install()
    endpoint = str(getattr(exporter, "_endpoint", "the endpoint"))  # as the SDK resolved it
    checked = _Checked(exporter)
    batches = BatchSpanProcessor(
        checked,
        max_queue_size=MAX_QUEUE,
        max_export_batch_size=BATCH,
        schedule_delay_millis=DELAY_MS,
    )
    resource = Resource.create({})
    grace_s = END_GRACE_S
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
            why = _flush(batches, checked, complaints, endpoint, message[1])
            answers.write(b"ok\n" if why is None else f"failed {why}\n".encode())
            answers.flush()
        elif message[0] == "end":
            grace_s = message[1]
    shutdown = _Background(batches.shutdown)
    finished = shutdown.wait(grace_s)
    if not finished:
        checked.shutdown()  # stops the retries: what is left fails at once
        shutdown.wait(ABORT_S)
    ok = finished and checked.checked()
    why = None if ok else _why(endpoint, complaints, finished, grace_s)
    answers.write(b"ok\n" if why is None else f"failed {why}\n".encode())
    answers.flush()


def _flush(
    batches: BatchSpanProcessor,
    checked: _Checked,
    complaints: _Complaints,
    endpoint: str,
    timeout_s: float,
) -> str | None:
    """Export everything received; None if all went out, else why not, within ``timeout_s``.

    When the exporter complains (it retries), a collector that is not even
    listening ends the wait at once: retrying will not bring it.
    """
    heard = complaints.count
    flush = _Background(batches.force_flush)
    deadline = time.monotonic() + timeout_s
    while not flush.wait(min(POLL_S, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return _why(endpoint, complaints, False, timeout_s)
        if complaints.count != heard:
            heard = complaints.count
            if (down := _no_collector(endpoint)) is not None:
                return down
    if checked.checked() and flush.result is True:
        return None
    return _why(endpoint, complaints, True, timeout_s)


def _why(endpoint: str, complaints: _Complaints, finished: bool, timeout_s: float) -> str:
    """Why spans were not exported, in one line: no collector listening, or what went wrong."""
    if (down := _no_collector(endpoint)) is not None:
        return down
    if not finished:
        return f"the export to {endpoint} did not finish in {timeout_s:g} s"
    return f"the export to {endpoint} failed ({complaints.latest or 'no reason given'})"


class _Background:
    """A call running in a daemon thread, waited for with a timeout.

    The SDK's ``force_flush`` ignores its timeout and its ``shutdown`` waits
    for an export that may retry for 10 s; neither may keep the parent
    waiting longer than it asked.
    """

    def __init__(self, call: Callable[[], object]) -> None:
        self.result: object = None
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(call,), name="orchestra-otlp", daemon=True).start()

    def _run(self, call: Callable[[], object]) -> None:
        self.result = call()
        self._done.set()

    def wait(self, timeout_s: float) -> bool:
        """Whether the call has returned, waiting up to ``timeout_s``."""
        return self._done.wait(timeout_s)


def _export_one(batches: BatchSpanProcessor, record: Any, resource: Resource) -> None:
    """Hand one record to the batch processor; one malformed record is logged and skipped."""
    try:
        span = to_readable(record, resource)
    except Exception:  # a record is data from the parent: a bad one must not end the export
        _log.exception("a span record could not be read; it is skipped")
        return
    batches.on_end(span)


def _no_collector(endpoint: str) -> str | None:
    """Why nothing accepts a connection at ``endpoint``; None if something does."""
    url = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
    default = 443 if url.scheme == "https" else 80 if url.scheme == "http" else 4317
    try:
        port = url.port or default
        with socket.create_connection((url.hostname or "localhost", port), timeout=PROBE_S):
            return None
    except TimeoutError:
        why = f"no answer in {PROBE_S:g} s"
    except (OSError, ValueError) as exc:
        why = (getattr(exc, "strerror", None) or str(exc)).lower()
    return f"no OTLP collector at {endpoint} ({why})"


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "nice"):
        os.nice(NICENESS)
    parser = argparse.ArgumentParser(prog="orchestra._telemetry.otlp_child")
    parser.add_argument("--protocol", default="http/protobuf")
    parser.add_argument("--endpoint", default=None)
    args = parser.parse_args(argv)
    serve(exporter_for(args.protocol, args.endpoint), sys.stdin.buffer, sys.stdout.buffer)
