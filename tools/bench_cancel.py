"""Benchmark: one cancel stops a 100-run tree, each run inside a 3 s tool.

Starts the ``slow_tree`` scenario with 99 children (100 runs) on the embedded
scripted provider over loopback HTTP, waits until every child is inside its
slow tool, calls ``handle.cancel()`` once and measures, on the real clock, the
time until the last run of the tree has recorded ``run_stopped``. Repeats and
reports the median, with the in-memory store and with the SQLite store (every
stopped run is saved before it counts as stopped).

    python tools/bench_cancel.py [--repeats 21] [--children 99]
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

import attrs
import trio

from orchestra import Event, Limits, MemoryStore, OpenAIProvider, Runner, Status, ToolPolicy
from orchestra._demo import demo_agent, demo_task
from orchestra._sqlite import SQLiteStore
from orchestra._tokens import encoding
from orchestra.testing import make_sandbox, scripted_server


class Clock:
    """Notes when runs enter their tool and when they stop."""

    def __init__(self, children: int) -> None:
        self.children = children
        self.in_tool = 0
        self.all_in_tool = trio.Event()
        self.stopped: list[float] = []

    def __call__(self, event: Event) -> None:
        if event.type == "tool_start" and event.data["tool"] == "scan_archive":
            self.in_tool += 1
            if self.in_tool == self.children:
                self.all_in_tool.set()
        elif event.type == "run_stopped":
            self.stopped.append(time.perf_counter())


async def once(url: str, store: Any, children: int, directory: Path) -> tuple[float, int]:
    clock = Clock(children)
    provider = OpenAIProvider(base_url=url, api_key="bench")
    runner = Runner(provider=provider, store=store, sink=clock)
    agent = demo_agent(
        "slow_tree",
        directory,
        limits=Limits(max_turns=500),
        child_limits=Limits(max_turns=5),
        policy=ToolPolicy(),
    )
    agent = attrs.evolve(agent, max_tokens=16_384)  # room for 99 tool calls in one reply
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("slow_tree", children))
        with trio.fail_after(60):
            await clock.all_in_tool.wait()
        start = time.perf_counter()
        handle.cancel("benchmark")
        result = await handle.wait()
    await provider.aclose()
    assert all(r.status is Status.INTERRUPTED for r in result.walk())
    return (max(clock.stopped) - start) * 1000, len(result.walk())


async def bench(repeats: int, children: int) -> dict[str, Any]:
    encoding()
    directory = make_sandbox(tempfile.mkdtemp(prefix="bench-cancel-"))
    out: dict[str, Any] = {"runs_per_tree": children + 1, "repeats": repeats}
    async with scripted_server() as url:
        for name in ("memory", "sqlite"):
            samples = []
            for i in range(repeats):
                gc.collect()  # each repeat starts clean: no garbage of the last one to collect
                store = MemoryStore() if name == "memory" else SQLiteStore(directory / f"{i}.db")
                ms, runs = await once(url, store, children, directory)
                assert runs == children + 1
                samples.append(ms)
            out[name] = {
                "median_ms": round(statistics.median(samples), 2),
                "max_ms": round(max(samples), 2),
                "samples_ms": [round(s, 2) for s in samples],
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--children", type=int, default=99)
    args = parser.parse_args()
    print(json.dumps(trio.run(bench, args.repeats, args.children), indent=2))


if __name__ == "__main__":
    main()
