"""Claim: one cancel stops a whole tree of runs, each inside a slow tool, at once.

Starts ``slow_tree`` with 20 children (21 runs, each child inside a 3 s
archive scan), cancels the root with one call 0.2 s after every child is
inside its scan, and prints how long it took until every run had recorded
``interrupted`` with the reason, and what the tree had spent by then (spend
is kept).

Exits 1 unless every run ended interrupted within 100 ms of the cancel.

    python examples/cancel_tree.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import trio

from orchestra import (
    Agent,
    Event,
    Limits,
    OpenAIProvider,
    Runner,
    RunResult,
    Status,
)
from orchestra.testing import demo_tools, make_sandbox, scripted_server

CHILDREN = 20
MAX_MS = 100.0
WAIT_S = 20.0


def tree_agent(directory: Path) -> Agent:
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions="You are a researcher. Answer the question using the tools.",
        tools=demo_tools(directory),
        limits=Limits(max_turns=5),
    )
    return Agent(
        name="assistant",
        model="slow_tree",
        instructions="You are an operations assistant. Delegate research to sub-agents.",
        tools=(researcher.as_tool(name="research", description="Research a question."),),
        limits=Limits(max_turns=100),
        max_tokens=4096,  # room for 20 tool calls in one reply
    )


async def cancel_tree(directory: Path) -> tuple[RunResult, float, float]:
    stopped: list[float] = []
    started = time.perf_counter()
    scanning = 0
    all_scanning = trio.Event()

    def sink(event: Event) -> None:
        nonlocal scanning
        if event.type == "run_stopped":
            stopped.append(time.perf_counter())
        elif event.type == "tool_start" and event.data.get("tool") == "scan_archive":
            scanning += 1
            if scanning == CHILDREN:
                all_scanning.set()

    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider, sink=sink)
        async with trio.open_nursery() as nursery:
            task = f"Scan the archives, children={CHILDREN}."
            handle = await runner.start(nursery, tree_agent(directory), task)
            with trio.move_on_after(WAIT_S):
                await all_scanning.wait()
            await trio.sleep(0.2)
            asked = time.perf_counter()
            handle.cancel("user pressed Stop")
            result = await handle.wait()
        await provider.aclose()
    return result, asked - started, 1000 * (max(stopped) - asked)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="cancel-tree-") as tmp:
        result, at, ms = trio.run(cancel_tree, make_sandbox(tmp))
    runs = result.walk()
    interrupted = sum(r.status is Status.INTERRUPTED for r in runs)
    print(f"one cancel() {at:.2f} s after the start, every child inside its 3 s scan")
    print(f"{len(runs)} runs stopped {ms:.1f} ms after one cancel(); {interrupted} interrupted")
    print(f"reason: {result.state.reason!r}; tree spend kept: ${result.tree_cost_usd:.6f}")
    if interrupted != len(runs) or len(runs) != CHILDREN + 1 or ms >= MAX_MS:
        print(f"CLAIM FAILED: not every run stopped interrupted within {MAX_MS:.0f} ms")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
