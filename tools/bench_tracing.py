"""Benchmark: wall time of 2,080 runs with OpenTelemetry tracing on, against 2,080 off.

Runs the ``research`` tree (a root and 3 children: 4 runs, 11 model calls, 9
tool calls, 24 spans) in rounds of 20 trees (80 runs), tracing off and on in
the order off, on, on, off, ...: 26 rounds each way, so 2,080 runs each way
by default (twice the 1,000 asked, to halve the variance of the ratio). The
provider is the scripted one over loopback HTTP with no latency, as
``orchestra demo`` runs it (``--in-process`` for the in-process transport;
``--latency-ms`` adds a stated delay to every model reply). No latency is the
worst case for the ratio: a tree then costs only orchestra's own CPU (client
and scripted server both), about 25 ms.

Tracing on means ``OTelTracer`` on a tracer provider made once, as a
long-lived process would, and each traced round ends with ``force_flush()``
(which for ``--otlp`` returns only once the backend took every span), so all
exporting of its spans counts in its time. That is a conservative bound: a
long-lived process waits for its spans once, at exit, while here each round
waits for the last export request (about 4 ms with Jaeger on loopback, 1% of
a round):

- ``--otlp URL``: ``configure_otlp`` (what ``--otlp`` uses): spans recorded as
  plain data, exported over OTLP/HTTP by the child process (e.g. to a Jaeger
  from ``otel/start-jaeger.sh``);
- ``--sdk``: the SDK's ``TracerProvider`` and ``BatchSpanProcessor`` instead
  (with ``--otlp``, its OTLP/HTTP exporter in a thread of this process);
- neither: spans recorded, then dropped by the sink (the recording cost alone);
- ``--null``: an A/A check, tracing off both ways: the ratio's noise floor.

Short rounds in off-on-on-off order cancel this VM's speed drift (it moves by
tens of percent over seconds). Reports the ratio of the totals, the median of
the ratios of adjacent rounds, each of them, and the share of the traced time
spent inside the tracer on the trio thread (measured directly, so free of the
drift).

    python tools/bench_tracing.py [--trees 20] [--rounds 26] [--otlp http://127.0.0.1:4318] [--sdk]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from orchestra import MemoryStore, OpenAIProvider, Runner, Status
from orchestra._model.tokens import encoding
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._telemetry.otel import OTelTracer, configure_otlp
from orchestra._telemetry.otlp_child import exporter_for
from orchestra._telemetry.spans import Record, RecordingTracerProvider
from orchestra.testing import ScriptedTransport, make_sandbox, scripted_server

SERVICE = "orchestra-bench"


class DiscardingExporter(SpanExporter):
    """Takes every batch and drops it (the SDK pipeline without a backend)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class DiscardingSink:
    """Takes every span record and drops it (the recording cost alone)."""

    def add(self, record: Record) -> None:
        pass

    def force_flush(self, timeout_s: float) -> bool:
        return True

    def shutdown(self, timeout_s: float) -> None:
        pass


class TimedTracer(OTelTracer):
    """The real tracer, also adding up the time spent in it (on the trio thread)."""

    seconds = 0.0

    def __call__(self, run: Any, event: Any) -> None:
        start = time.perf_counter()
        super().__call__(run, event)
        TimedTracer.seconds += time.perf_counter() - start


def tracer_provider(otlp: str | None, sdk: bool) -> Any:
    if not sdk:
        if otlp:
            return configure_otlp(service_name=SERVICE, endpoint=otlp)
        return RecordingTracerProvider(sink=DiscardingSink())
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    exporter = exporter_for("http/protobuf", otlp) if otlp else DiscardingExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


async def trees(count: int, directory: Path, tracer: OTelTracer | None, latency: float) -> int:
    if latency >= 0:
        async with scripted_server(latency=latency) as url:
            return await _trees(count, directory, tracer, OpenAIProvider(base_url=url, api_key="b"))
    transport = ScriptedTransport()
    return await _trees(
        count, directory, tracer, OpenAIProvider(base_url="http://scripted/v1", transport=transport)
    )


async def _trees(
    count: int, directory: Path, tracer: OTelTracer | None, provider: OpenAIProvider
) -> int:
    runner = Runner(provider=provider, store=MemoryStore(), tracer=tracer)
    agent = demo_agent("research", directory)
    runs = 0
    for _ in range(count):
        result = await runner.run(agent, demo_task("research"))
        assert result.status is Status.COMPLETED
        runs += len(result.walk())
    await provider.aclose()
    return runs


def timed(count: int, directory: Path, spans: Any, latency: float) -> tuple[float, int]:
    """Seconds for ``count`` trees (traced into ``spans`` unless None, flushed in the time)."""
    gc.collect()
    tracer = TimedTracer(tracer_provider=spans) if spans is not None else None
    start = time.perf_counter()
    runs = trio.run(trees, count, directory, tracer, latency)
    if spans is not None:
        assert spans.force_flush(), "the spans were not exported"
    return time.perf_counter() - start, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=20, help="trees (of 4 runs) per round")
    parser.add_argument("--rounds", type=int, default=26, help="rounds each way (even)")
    parser.add_argument("--otlp", default=None, help="OTLP/HTTP endpoint; default: discard")
    parser.add_argument("--sdk", action="store_true", help="the SDK's span pipeline instead")
    parser.add_argument(
        "--null", action="store_true", help="A/A check: tracing off in both modes (noise floor)"
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="per model reply")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="scripted provider as an in-process transport, not loopback HTTP",
    )
    args = parser.parse_args()
    encoding()
    directory = make_sandbox(tempfile.mkdtemp(prefix="bench-tracing-"))
    latency = -1.0 if args.in_process else args.latency_ms / 1000
    spans = tracer_provider(args.otlp, args.sdk)
    timed(5, directory, spans, latency)  # warm up both paths (and the export process)
    timed(5, directory, None, latency)
    TimedTracer.seconds = 0.0
    rounds: dict[str, list[float]] = {"off": [], "on": []}
    for mode in ["off", "on", "on", "off"] * ((args.rounds + 1) // 2):
        traced = mode == "on" and not args.null
        seconds, runs = timed(args.trees, directory, spans if traced else None, latency)
        rounds[mode].append(seconds)
    spans.shutdown()
    report(args, runs, rounds["off"], rounds["on"])


def report(args: argparse.Namespace, runs: int, off: list[float], on: list[float]) -> None:
    ratios = [b / a for a, b in zip(off, on, strict=True)]  # adjacent rounds
    pipeline = "sdk BatchSpanProcessor" if args.sdk else "orchestra (records, export process)"
    print(
        json.dumps(
            {
                "runs_per_mode": runs * len(on),
                "runs_per_round": runs,
                "ratio_on_off_total": round(sum(on) / sum(off), 3),
                "ratio_on_off_median": round(statistics.median(ratios), 3),
                "tracer_share_of_traced_time": round(TimedTracer.seconds / sum(on), 3),
                "pipeline": "none (A/A noise check)" if args.null else pipeline,
                "exporter": args.otlp or "discarding",
                "provider": "in-process transport" if args.in_process else "loopback HTTP",
                "latency_ms": 0 if args.in_process else args.latency_ms,
                "off_s_total": round(sum(off), 3),
                "on_s_total": round(sum(on), 3),
                "ratios": [round(r, 3) for r in ratios],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
