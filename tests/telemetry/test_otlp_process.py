"""The export process end to end: records, pipe, child, SDK exporter, loopback OTLP receiver."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource

from orchestra import RecordingTracerProvider, Runner, flush_spans
from orchestra._telemetry.otel import OTelTracer
from orchestra._telemetry.otlp_process import ExportProcess
from orchestra.testing import InMemorySpanSink


class Receiver:
    """An OTLP/HTTP trace receiver on loopback, keeping what it is sent."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.status == 200:
                    receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]

    def services(self) -> set[str]:
        return {
            kv.value.string_value
            for request in self.requests
            for resource_spans in request.resource_spans
            for kv in resource_spans.resource.attributes
            if kv.key == "service.name"
        }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def export(receiver: Receiver) -> Iterator[ExportProcess]:
    resource = Resource.create({"service.name": "orchestra-test-export"})
    process = ExportProcess(protocol="http/protobuf", endpoint=receiver.url, resource=resource)
    yield process
    process.shutdown(timeout_s=10)


def span(tracer: Any, name: str, **attributes: Any) -> None:
    tracer.start_span(name, attributes=attributes).end()


def attributes(otlp_span: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in otlp_span.attributes}


async def test_the_backend_receives_the_spans_the_tree_made(
    receiver, export, provider, scenario_agent
):
    memory = InMemorySpanSink()
    for sink in (export, memory):
        runner = Runner(
            provider=provider, tracer=OTelTracer(tracer_provider=RecordingTracerProvider(sink=sink))
        )
        result = await runner.run(scenario_agent("research"), "go")
    assert export.force_flush(timeout_s=10)  # True only once the receiver answered
    sent = receiver.spans()
    assert len(sent) == len(memory.get_finished_spans()) == 28  # 4 of them segment spans
    assert len({s.trace_id for s in sent}) == 1
    by_id = {s.span_id: s for s in sent}
    root = next(s for s in sent if not s.parent_span_id)
    assert root.name == "orchestra.segment assistant"
    assert all(s.parent_span_id in by_id for s in sent if s is not root)  # one connected tree
    assert receiver.services() == {"orchestra-test-export"}
    same = sorted((s.name, sorted(attributes(s))) for s in sent)
    assert same == sorted((s.name, sorted(s.attributes)) for s in memory.get_finished_spans())
    chat_cost = sum(
        attributes(s)["orchestra.call.cost_usd"] for s in sent if s.name.startswith("chat")
    )
    assert chat_cost == pytest.approx(result.tree_cost_usd, abs=1e-9)


def test_force_flush_says_false_when_the_backend_refuses(receiver, export):
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    receiver.status = 400  # not retried by the exporter
    span(tracer, "refused")
    assert not export.force_flush(timeout_s=10)
    receiver.status = 200
    span(tracer, "accepted")
    assert export.force_flush(timeout_s=10)  # a failure is reported once
    assert [s.name for s in receiver.spans()] == ["accepted"]


def test_the_child_outlives_ctrl_c(receiver, export):
    pid = export._process.pid
    assert os.getpgid(pid) != os.getpgrp()  # a terminal's Ctrl-C does not reach it
    assert export.force_flush(timeout_s=10)  # the child is up
    os.kill(pid, signal.SIGINT)  # and ignores a SIGINT sent to it alone
    span(RecordingTracerProvider(sink=export).get_tracer("t"), "after ctrl-c")
    assert export.force_flush(timeout_s=10)
    assert [s.name for s in receiver.spans()] == ["after ctrl-c"]


def test_a_span_that_cannot_be_pickled_is_dropped_alone(receiver, export):
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    span(tracer, "fine", n=1)
    span(tracer, "odd", value=threading.Lock())
    span(tracer, "also fine", n=2)
    assert export.force_flush(timeout_s=10)
    assert [s.name for s in receiver.spans()] == ["fine", "also fine"]


def test_values_of_other_types_are_sent_as_text_as_the_sdk_does(receiver, export):
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    span(tracer, "mixed", ok="yes", odd={1, 2}, ids=[1, 2])
    assert export.force_flush(timeout_s=10)
    (sent,) = receiver.spans()
    assert attributes(sent)["ok"] == "yes"
    assert attributes(sent)["odd"] == "{1, 2}"  # validated in the child, by the SDK


def test_a_stuck_child_never_blocks_the_caller_and_the_queue_is_bounded(receiver):
    resource = Resource.create({"service.name": "stuck"})
    export = ExportProcess(
        protocol="http/protobuf", endpoint=receiver.url, resource=resource, max_queue=2000
    )
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    os.kill(export._process.pid, signal.SIGSTOP)
    try:
        for i in range(20_000):  # far more than the pipe and the queue hold
            span(tracer, "s", i=i, padding="x" * 200)
    finally:
        os.kill(export._process.pid, signal.SIGCONT)
    assert export.dropped > 0
    assert export.force_flush(timeout_s=20)
    assert 2000 <= len(receiver.spans()) == 20_000 - export.dropped
    export.shutdown(timeout_s=10)


def test_a_dead_child_drops_spans_and_says_so(receiver, export):
    export._process.kill()
    export._process.wait()
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    for _ in range(100):
        span(tracer, "lost")
    assert not export.force_flush(timeout_s=10)
    assert export.dropped >= 64  # whole batches; the partial one with the flush
    export.shutdown(timeout_s=5)  # returns


def test_spans_ended_after_shutdown_are_dropped(receiver):
    resource = Resource.create({"service.name": "closed"})
    export = ExportProcess(protocol="http/protobuf", endpoint=receiver.url, resource=resource)
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    span(tracer, "before")
    export.shutdown(timeout_s=10)
    assert export._process.returncode == 0
    for _ in range(40):  # more than a batch: nothing is written to the closed pipe
        span(tracer, "after")
    assert not export.force_flush(timeout_s=1)
    assert export.dropped == 40
    assert [s.name for s in receiver.spans()] == ["before"]


def test_a_malformed_record_is_skipped_by_the_child(receiver, export):
    export.add(("not", "a", "record"))
    span(RecordingTracerProvider(sink=export).get_tracer("t"), "next")
    assert export.force_flush(timeout_s=10)
    assert [s.name for s in receiver.spans()] == ["next"]


async def test_flush_spans_waits_off_the_trio_thread_and_says_whether_it_worked(receiver, export):
    spans = RecordingTracerProvider(sink=export)
    span(spans.get_tracer("t"), "from trio")
    assert await flush_spans(spans, timeout_s=10)
    assert [s.name for s in receiver.spans()] == ["from trio"]
    receiver.status = 400
    span(spans.get_tracer("t"), "refused")
    assert not await flush_spans(spans, timeout_s=10)


@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")  # 3.12+
def test_a_fork_drops_its_spans_and_leaves_the_pipe_to_the_parent(receiver, export):
    tracer = RecordingTracerProvider(sink=export).get_tracer("t")
    span(tracer, "before fork")
    pid = os.fork()
    if pid == 0:  # the fork: nothing it ends may reach the parent's pipe
        for _ in range(40):
            span(tracer, "in the fork")
        ok = not export.force_flush(timeout_s=1) and export.dropped == 40
        export.shutdown(timeout_s=1)  # returns at once: not its export process
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    span(tracer, "after fork")
    assert export.force_flush(timeout_s=10)
    assert [s.name for s in receiver.spans()] == ["before fork", "after fork"]
