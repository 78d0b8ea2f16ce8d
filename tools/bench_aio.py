"""Benchmark: a tree run through ``orchestra.aio`` (asyncio) against native trio.

The same ``plan`` tree (3 turns, 2 tools, in-process scripted provider), run
N times one after another (``--runs``, default 300) in one event loop each
way, alternating rounds (``--rounds``, default 5): native ``trio.run`` of
``Runner.run`` N times, and ``asyncio.run`` of ``aio.run`` N times (one trio
guest run hosts them; a tree at a time keeps it from winding down between
them by holding it open). Reports the median per-run time of each and their
ratio (target: aio ≤ 1.1× native), then the time for a cancel of the
awaiting asyncio task to stop a 20-run ``slow_tree``.

    python tools/bench_aio.py [--runs 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import trio

from orchestra import OpenAIProvider, Runner, Status, aio
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox


def runner() -> Runner:
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    return Runner(provider=provider)


def native(box: Path, runs: int) -> float:
    async def main() -> float:
        r, agent = runner(), demo_agent("plan", box)
        began = time.perf_counter()
        for _ in range(runs):
            assert (await r.run(agent, demo_task("plan"))).status is Status.COMPLETED
        return (time.perf_counter() - began) / runs

    return trio.run(main)


def through_aio(box: Path, runs: int) -> float:
    async def main() -> float:
        r, agent = runner(), demo_agent("plan", box)
        keep = await aio.start(r, demo_agent("slow", box), demo_task("slow"))  # holds the run
        began = time.perf_counter()
        for _ in range(runs):
            assert (await aio.run(r, agent, demo_task("plan"))).status is Status.COMPLETED
        took = (time.perf_counter() - began) / runs
        keep.cancel()
        await keep.wait()
        return took

    return asyncio.run(main())


def cancel_ms(box: Path) -> float:
    async def main() -> float:
        handle = await aio.start(runner(), demo_agent("slow_tree", box), demo_task("slow_tree", 19))
        waiter = asyncio.create_task(handle.wait())
        await asyncio.sleep(1.0)
        began = time.perf_counter()
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        took = (time.perf_counter() - began) * 1000
        result = await handle.wait()
        assert len(result.walk()) == 20
        assert {n.status for n in result.walk()} == {Status.INTERRUPTED}
        return took

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        box = make_sandbox(Path(tmp) / "box")
        trio_s, aio_s = [], []
        for _ in range(args.rounds):
            trio_s.append(native(box, args.runs))
            aio_s.append(through_aio(box, args.runs))
        t, a = statistics.median(trio_s), statistics.median(aio_s)
        print(f"per run: native trio {t * 1000:.2f} ms, aio {a * 1000:.2f} ms: {a / t:.2f}x")
        cancels = sorted(cancel_ms(box) for _ in range(3))
        print(
            f"cancel of the awaiting task, 20-run tree stopped: {cancels[1]:.1f} ms (median of 3)"
        )


if __name__ == "__main__":
    main()
