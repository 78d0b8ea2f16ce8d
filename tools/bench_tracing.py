"""Benchmark: wall time of 1,000 runs with OpenTelemetry tracing on, against off.

Runs the ``research`` tree (a root and 3 children: 4 runs, 11 model calls, 9
tool calls) 25 times per round, in 10 rounds with tracing off alternating with
10 rounds with tracing on (``OTelTracer`` feeding the SDK's
``BatchSpanProcessor``): 1,000 runs each way, on the scripted provider over
loopback HTTP as ``orchestra demo`` runs it (``--in-process`` for the
in-process transport). Short alternating rounds keep this VM's speed drift
(tens of percent over seconds) out of the ratio. The exporter is OTLP over
HTTP with ``--otlp URL`` (e.g. a Jaeger from ``otel/start-jaeger.sh``),
otherwise one that drops each batch (span creation, batching and the export
thread still run). Reports each round's seconds, the ratio of the totals and the median of
the per-round ratios, and the share of the traced time spent inside the tracer
itself (measured directly, so free of the drift).

    python tools/bench_tracing.py [--trees 25] [--rounds 10] [--otlp http://127.0.0.1:4318]
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
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from orchestra import MemoryStore, OpenAIProvider, Runner, Status
from orchestra._demo import demo_agent, demo_task
from orchestra._otel import OTelTracer, configure_otlp
from orchestra._tokens import encoding
from orchestra.testing import ScriptedTransport, make_sandbox, scripted_server


class DiscardingExporter(SpanExporter):
    """Takes every batch and drops it, as a backend would after shipping (no memory growth)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class TimedTracer(OTelTracer):
    """The real tracer, also adding up the time spent in it (on the trio thread)."""

    seconds = 0.0

    def __call__(self, run: Any, event: Any) -> None:
        start = time.perf_counter()
        super().__call__(run, event)
        TimedTracer.seconds += time.perf_counter() - start


def tracer_provider(otlp: str | None) -> tuple[TracerProvider, Any]:
    if otlp:
        return configure_otlp(service_name="orchestra-bench", endpoint=otlp), None
    exporter = DiscardingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


async def trees(count: int, directory: Path, tracer: OTelTracer | None, http: bool) -> int:
    if http:
        async with scripted_server() as url:
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


def timed(
    count: int, directory: Path, otlp: str | None, traced: bool, http: bool
) -> tuple[float, int]:
    gc.collect()
    provider, _ = tracer_provider(otlp) if traced else (None, None)
    tracer = TimedTracer(tracer_provider=provider) if provider else None
    start = time.perf_counter()
    runs = trio.run(trees, count, directory, tracer, http)
    if provider is not None:
        provider.shutdown()  # the export of the last batch counts too
    return time.perf_counter() - start, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=25, help="trees (of 4 runs) per round")
    parser.add_argument("--rounds", type=int, default=10, help="off/on round pairs")
    parser.add_argument("--otlp", default=None, help="OTLP/HTTP endpoint; default in-memory")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="scripted provider as an in-process transport, not loopback HTTP",
    )
    args = parser.parse_args()
    encoding()
    directory = make_sandbox(tempfile.mkdtemp(prefix="bench-tracing-"))
    http = not args.in_process
    timed(10, directory, args.otlp, True, http)  # warm up both paths
    off, on = [], []
    for _ in range(args.rounds):
        seconds, runs = timed(args.trees, directory, args.otlp, False, http)
        off.append(seconds)
        seconds, runs = timed(args.trees, directory, args.otlp, True, http)
        on.append(seconds)
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    print(
        json.dumps(
            {
                "runs_per_mode": runs * args.rounds,
                "tracer_share_of_traced_time": round(TimedTracer.seconds / sum(on), 3),
                "ratio_on_off_total": round(sum(on) / sum(off), 3),
                "runs_per_round": runs,
                "exporter": args.otlp or "discarding",
                "provider": "in-process transport" if args.in_process else "loopback HTTP",
                "off_s": [round(x, 3) for x in off],
                "on_s": [round(x, 3) for x in on],
                "ratio_on_off_median": round(statistics.median(ratios), 3),
                "ratios": [round(r, 3) for r in ratios],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
