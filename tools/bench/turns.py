"""Overhead per turn: Orchestra against the bare trio + httpx loop, one run at a time.

Each sample runs ``runs`` ``plan`` runs one after another (3 model calls
each) with Orchestra (one ``OpenAIProvider``, one ``Runner``, the default
``MemoryStore``) and with the bare loop (one ``httpx.AsyncClient``), in
alternating order, and divides wall time and this process's CPU time by the
turns. Over loopback HTTP the scripted server is another process, so the CPU
is the client's alone; in-process both talk to ``ScriptedTransport``, so the
CPU includes the scripted provider's work (the same for both).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from . import common
from .common import row

FULL = {"runs": 20, "repeats": 35, "warmup": 10}
"""Many short samples: a pair (Orchestra, bare) a few dozen ms apart shares the machine's
drift, so the median of the pairs' ratios holds on a shared VM whose speed wanders."""
QUICK = {"runs": 5, "repeats": 2, "warmup": 2}
TURNS_PER_RUN = 3


async def _samples(
    url: str, transport: Any, p: dict[str, Any], stream: bool = False
) -> dict[str, list[float]]:
    import httpx

    from orchestra import OpenAIProvider, Runner, Status

    from .bare import TASK, bare_run

    directory = common.sandbox()
    agent = common.plan_agent(directory)
    tools = agent.tool_specs()
    provider = OpenAIProvider(base_url=url, api_key="bench", transport=transport, stream=stream)
    runner = Runner(provider=provider)
    client = httpx.AsyncClient(
        base_url=url, headers={"Authorization": "Bearer bench"}, timeout=120, transport=transport
    )

    async def orchestra_run() -> None:
        result = await runner.run(agent, TASK)
        assert result.status is Status.COMPLETED and result.state.turns == TURNS_PER_RUN

    async def bare() -> None:
        assert await bare_run(client, tools, directory, stream=stream) == TURNS_PER_RUN

    modes = {"orchestra": orchestra_run, "bare": bare}
    out: dict[str, list[float]] = {f"{m}_{k}": [] for m in modes for k in ("wall", "cpu")}
    for mode in modes.values():
        for _ in range(p["warmup"]):
            await mode()
    for i in range(p["repeats"]):
        order = ("orchestra", "bare") if i % 2 == 0 else ("bare", "orchestra")
        for name in order:
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(p["runs"]):
                await modes[name]()
            turns = p["runs"] * TURNS_PER_RUN
            out[f"{name}_wall"].append((time.perf_counter() - wall) / turns * 1e3)
            out[f"{name}_cpu"].append((time.process_time() - cpu) / turns * 1e3)
    await provider.aclose()
    await client.aclose()
    return out


def run(quick: bool) -> common.Section:
    import trio

    from orchestra.testing import ScriptedTransport

    p = QUICK if quick else FULL
    common.warm_tokenizer()
    with common.scripted_server() as url:
        http = trio.run(_samples, url, None, p)
        streamed = trio.run(_samples, url, None, p, True)
    local = trio.run(_samples, "http://scripted/v1", ScriptedTransport(), p)

    def pair(name: str, unit: str, data: dict[str, list[float]], key: str) -> common.Row:
        return row(
            name,
            unit,
            data[f"orchestra_{key}"],
            baseline="bare trio+httpx loop",
            baseline_samples=data[f"bare_{key}"],
            paired=True,
        )

    rows = [
        pair("loopback HTTP: client CPU per turn", "ms", http, "cpu"),
        pair("loopback HTTP: wall per turn", "ms", http, "wall"),
        pair("loopback HTTP, streamed replies: client CPU per turn", "ms", streamed, "cpu"),
        pair("loopback HTTP, streamed replies: wall per turn", "ms", streamed, "wall"),
        pair("in-process transport: CPU per turn (client + scripted provider)", "ms", local, "cpu"),
        pair("in-process transport: wall per turn", "ms", local, "wall"),
    ]
    cpu, streamed_cpu = rows[0], rows[2]
    met = cpu["ratio"] is not None and cpu["ratio"] <= 1.1
    streamed_met = streamed_cpu["ratio"] is not None and streamed_cpu["ratio"] <= 1.1
    result = common.section(
        "turn_overhead",
        "Overhead per turn",
        f"This run: {p['runs']} runs per sample, {p['repeats']} samples per mode.",
        rows,
        [
            common.target(
                "client CPU per turn over HTTP ≤ 1.1× bare",
                f"{common.ratio_text(cpu['ratio'])} ({common.fmt(cpu['median'])} ms vs "
                f"{common.fmt(cpu['baseline_summary']['median'])} ms)",
                met,
            ),
            common.target(
                "client CPU per streamed turn over HTTP ≤ 1.1× bare streamed loop",
                f"{common.ratio_text(streamed_cpu['ratio'])} "
                f"({common.fmt(streamed_cpu['median'])} ms vs "
                f"{common.fmt(streamed_cpu['baseline_summary']['median'])} ms)",
                streamed_met,
            ),
        ],
    )
    result["notes"].append(
        "The bare loop (tools/bench/bare.py) sends the same messages, tool declarations and "
        "max_tokens; it keeps no state, counts no tokens, emits no events and never retries. "
        "Streamed, it reads the events with httpx-sse and assembles content and tool calls; "
        "Orchestra also counts each piece's tokens (to charge a cut stream) and tells it to "
        "live readers."
    )
    return result
