"""Tracing on against off: per-turn overhead of ``OTelTracer``.

``plan`` runs one after another over loopback HTTP (the scripted server in
another process, so the CPU measured is the client's), with one ``Runner``
without a tracer and one with ``OTelTracer`` on a ``RecordingTracerProvider``
whose sink keeps the span records in memory (``InMemorySpanSink``, cleared
between samples outside the timing): the cost of making every span, not of
exporting it. Samples alternate off, on, on, off, ...
"""

from __future__ import annotations

import gc
import time
from typing import Any

from . import common
from .common import row

FULL = {"runs": 60, "repeats": 8, "warmup": 10}
QUICK = {"runs": 5, "repeats": 2, "warmup": 2}


async def _samples(url: str, p: dict[str, Any]) -> dict[str, list[float]]:
    from orchestra import OpenAIProvider, OTelTracer, RecordingTracerProvider, Runner, Status
    from orchestra.testing import InMemorySpanSink

    from .bare import TASK

    agent = common.plan_agent(common.sandbox())
    provider = OpenAIProvider(base_url=url, api_key="bench")
    sink = InMemorySpanSink()
    tracer = OTelTracer(tracer_provider=RecordingTracerProvider(sink=sink))
    runners = {"off": Runner(provider=provider), "on": Runner(provider=provider, tracer=tracer)}
    out: dict[str, list[float]] = {f"{m}_{k}": [] for m in runners for k in ("wall", "cpu")}

    async def sample(mode: str, runs: int) -> tuple[float, float]:
        sink.clear()
        gc.collect()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(runs):
            result = await runners[mode].run(agent, TASK)
            assert result.status is Status.COMPLETED
        turns = runs * 3
        return (time.perf_counter() - wall) / turns * 1e3, (time.process_time() - cpu) / turns * 1e3

    for mode in runners:
        await sample(mode, p["warmup"])
    assert sink.get_finished_spans(), "tracing on recorded no span"
    for i in range(p["repeats"]):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            wall, cpu = await sample(mode, p["runs"])
            out[f"{mode}_wall"].append(wall)
            out[f"{mode}_cpu"].append(cpu)
    await provider.aclose()
    return out


def run(quick: bool) -> common.Section:
    import trio

    p = QUICK if quick else FULL
    common.warm_tokenizer()
    with common.scripted_server() as url:
        data = trio.run(_samples, url, p)
    base = {"baseline": "tracing off", "paired": True}
    rows = [
        row(
            "tracing on: client CPU per turn",
            "ms",
            data["on_cpu"],
            baseline_samples=data["off_cpu"],
            **base,
        ),
        row(
            "tracing on: wall per turn",
            "ms",
            data["on_wall"],
            baseline_samples=data["off_wall"],
            **base,
        ),
    ]
    return common.section(
        "tracing",
        "Tracing on vs off",
        f"This run: {p['runs']} `plan` runs per sample, {p['repeats']} samples per mode.",
        rows,
    )
