"""Claim: a whole run tree is ONE OpenTelemetry trace in a real backend, with costs that add up.

Runs the ``research`` tree (a root run that spawns three researcher child
runs) against the in-process scripted provider and exports its spans over
OTLP to a local Jaeger (``otel/start-jaeger.sh``). Prints the root run id,
the trace id, the tree cost and the Jaeger URLs to look at the trace.

With ``--check`` it then reads the trace back from Jaeger's query API (polling
up to 20 s) and asserts it holds one ``invoke_agent`` span per run (4), with
exactly the tree's run ids; it exits non-zero otherwise.

    otel/start-jaeger.sh
    python examples/research_trace.py [--check]

Endpoint: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://127.0.0.1:4318``,
OTLP/HTTP; set ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` and port 4317 for gRPC).
Query API: ``ORCHESTRA_JAEGER_URL`` (default ``http://127.0.0.1:16686``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import httpx
import trio

from orchestra import (
    OpenAIProvider,
    OTelTracer,
    RecordingTracerProvider,
    Runner,
    RunResult,
    configure_otlp,
)
from orchestra.testing import demo_agent, demo_task, make_sandbox, scripted_server

JAEGER = os.environ.get("ORCHESTRA_JAEGER_URL", "http://127.0.0.1:16686").rstrip("/")
DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
POLL_TIMEOUT_S = 20.0


async def research(spans: RecordingTracerProvider) -> RunResult:
    directory = make_sandbox(tempfile.mkdtemp(prefix="research-trace-"))
    agent = demo_agent("research", directory)
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="x")
        try:
            runner = Runner(provider=provider, tracer=OTelTracer(tracer_provider=spans))
            return await runner.run(agent, demo_task("research"))
        finally:
            await provider.aclose()


def trace_id_of(result: RunResult) -> str:
    """The trace id from the root's W3C ``traceparent`` (version-traceid-spanid-flags)."""
    return result.state.trace_context["traceparent"].split("-")[1]


def fetch_trace(trace_id: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{JAEGER}/api/traces/{trace_id}", timeout=5.0)
    except httpx.TransportError:  # not up (yet): keep polling
        return None
    if response.status_code != 200:
        return None
    data = response.json().get("data") or []
    return data[0] if data else None


def agent_run_ids(trace: dict[str, Any]) -> list[str]:
    """``orchestra.run.id`` of every ``invoke_agent`` span in a Jaeger trace."""
    ids = []
    for span in trace["spans"]:
        tags = {t["key"]: t["value"] for t in span["tags"]}
        if tags.get("gen_ai.operation.name") == "invoke_agent":
            ids.append(str(tags["orchestra.run.id"]))
    return ids


def check(result: RunResult, trace_id: str) -> bool:
    """Poll Jaeger until the trace holds an agent span for every run of the tree."""
    expected = sorted(r.run_id for r in result.walk())
    deadline = time.monotonic() + POLL_TIMEOUT_S
    found: list[str] = []
    while time.monotonic() < deadline:
        trace = fetch_trace(trace_id)
        found = sorted(agent_run_ids(trace)) if trace else []
        if len(found) >= len(expected):
            break
        time.sleep(0.25)
    ok = found == expected and len(expected) == 4
    print(f"check: {len(found)} invoke_agent spans in Jaeger, expected {len(expected)}: ", end="")
    print("OK, run ids match" if ok else f"MISMATCH\n  expected {expected}\n  found    {found}")
    return ok


def main() -> int:
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", DEFAULT_ENDPOINT)
    spans = configure_otlp(endpoint=endpoint)
    try:
        result = trio.run(research, spans)
    finally:
        spans.shutdown()  # the export process sends the rest, then exits
    trace_id = trace_id_of(result)
    print(f"root run:  {result.run_id} ({result.status.value}, {len(result.children)} children)")
    print(f"trace id:  {trace_id}")
    print(f"tree cost: ${result.tree_cost_usd:.6f}")
    print(f"Jaeger:    {JAEGER}/trace/{trace_id}")
    print(f"API:       {JAEGER}/api/traces/{trace_id}")
    if "--check" in sys.argv[1:]:
        return 0 if check(result, trace_id) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
