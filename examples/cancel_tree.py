"""Claim: one cancel stops a whole tree of runs, each inside a slow tool, at once.

Starts ``slow_tree`` with 20 children (21 runs, each child inside a 3 s
archive scan), cancels the root after 1 s with one call, and prints how long
it took until every run had recorded ``interrupted`` with the reason, and what
each run had spent by then (spend is kept).

    python examples/cancel_tree.py
"""

from __future__ import annotations

import tempfile
import time

import attrs
import trio

from orchestra import Event, Limits, OpenAIProvider, Runner, Status, ToolPolicy
from orchestra._demo import demo_agent, demo_task
from orchestra.testing import make_sandbox, scripted_server

CHILDREN = 20


async def main() -> None:
    stopped: list[float] = []

    def sink(event: Event) -> None:
        if event.type == "run_stopped":
            stopped.append(time.perf_counter())

    directory = make_sandbox(tempfile.mkdtemp(prefix="cancel-tree-"))
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider, sink=sink)
        agent = demo_agent(
            "slow_tree",
            directory,
            limits=Limits(max_turns=100),
            child_limits=Limits(max_turns=5),
            policy=ToolPolicy(),
        )
        agent = attrs.evolve(agent, max_tokens=4096)
        async with trio.open_nursery() as nursery:
            handle = await runner.start(nursery, agent, demo_task("slow_tree", CHILDREN))
            await trio.sleep(1.0)
            asked = time.perf_counter()
            handle.cancel("user pressed Stop")
            result = await handle.wait()
        await provider.aclose()
    runs = result.walk()
    assert all(r.status is Status.INTERRUPTED for r in runs)
    print(f"{len(runs)} runs stopped {1000 * (max(stopped) - asked):.1f} ms after one cancel()")
    print(f"reason: {result.state.reason!r}; tree spend kept: ${result.tree_cost_usd:.6f}")


if __name__ == "__main__":
    trio.run(main)
