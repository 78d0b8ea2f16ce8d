"""Benchmark: wall time of 1,000 runs with OpenTelemetry tracing on, against off.

Runs the ``research`` tree (a root and 3 children: 4 runs, 11 model calls, 9 tool
calls) 250 times, i.e. 1,000 runs, on the in-process scripted provider, with
tracing off and with tracing on (``OTelTracer`` feeding the SDK's
``BatchSpanProcessor``), alternating off/on rounds so both see the same
machine. The exporter is OTLP over HTTP when ``--otlp URL`` is given (e.g. a
Jaeger started by ``otel/start-jaeger.sh``), otherwise an in-memory exporter
(span creation, batching and the export thread still run). Reports each
round's seconds and the median ratio on/off.

    python tools/bench_tracing.py [--trees 250] [--rounds 3] [--otlp http://127.0.0.1:4318]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestra import Limits, MemoryStore, OpenAIProvider, Runner, Status, ToolPolicy
from orchestra._demo import demo_agent, demo_task
from orchestra._otel import OTelTracer, configure_otlp
from orchestra._tokens import encoding
from orchestra.testing import ScriptedTransport, make_sandbox


def tracer_provider(otlp: str | None) -> tuple[TracerProvider, Any]:
    if otlp:
        return configure_otlp(service_name="orchestra-bench", endpoint=otlp), None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


async def trees(count: int, directory: Path, tracer: OTelTracer | None) -> int:
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    runner = Runner(provider=provider, store=MemoryStore(), tracer=tracer)
    agent = demo_agent(
        "research",
        directory,
        limits=Limits(max_turns=20),
        child_limits=Limits(max_turns=8, max_budget_usd=0.05),
        policy=ToolPolicy(),
    )
    runs = 0
    for _ in range(count):
        result = await runner.run(agent, demo_task("research"))
        assert result.status is Status.COMPLETED
        runs += len(result.walk())
    await provider.aclose()
    return runs


def timed(count: int, directory: Path, otlp: str | None, traced: bool) -> tuple[float, int]:
    gc.collect()
    provider, _ = tracer_provider(otlp) if traced else (None, None)
    tracer = OTelTracer(tracer_provider=provider) if provider else None
    start = time.perf_counter()
    runs = trio.run(trees, count, directory, tracer)
    if provider is not None:
        provider.shutdown()  # the export of the last batch counts too
    return time.perf_counter() - start, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--otlp", default=None, help="OTLP/HTTP endpoint; default in-memory")
    args = parser.parse_args()
    encoding()
    directory = make_sandbox(tempfile.mkdtemp(prefix="bench-tracing-"))
    timed(10, directory, args.otlp, True)  # warm up both paths
    off, on = [], []
    for _ in range(args.rounds):
        seconds, runs = timed(args.trees, directory, args.otlp, False)
        off.append(seconds)
        seconds, runs = timed(args.trees, directory, args.otlp, True)
        on.append(seconds)
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    print(
        json.dumps(
            {
                "runs_per_round": runs,
                "exporter": args.otlp or "in-memory",
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
