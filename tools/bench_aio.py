"""Benchmark: a tree run through ``orchestra.aio`` (asyncio) against native trio.

The same ``plan`` tree (3 turns, 2 tools, in-process scripted provider), run
N times one after another (``--runs``, default 300) in one event loop each
way, alternating rounds (``--rounds``, default 5): native ``trio.run`` of
``Runner.run`` N times, and ``asyncio.run`` of ``aio.run`` N times (one trio
run in aio's thread hosts them all: it stays up between trees). Reports the
median per-run time of each and their ratio (target: aio ≤ 1.1× native),
and a third way in, each run in a trio thread
(``asyncio.to_thread(trio.run, ...)``); then the time for a cancel of the
awaiting asyncio task to stop a 20-run ``slow_tree``.

Two providers, each its own table: the scripted provider in process (a mock
transport: the cheapest tree there is, so the adapter's fixed cost per tree
weighs most) and ``orchestra serve-scripted`` over loopback HTTP (a tree as
it runs against a server).

    python tools/bench_aio.py [--runs 300] [--rounds 5] [--over inprocess|http|both]
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
from bench.common import scripted_server

from orchestra import OpenAIProvider, Runner, Status, aio
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox


def runner(url: str | None = None) -> Runner:
    """A runner on the scripted server at ``url``, or in process (None)."""
    if url is not None:
        return Runner(provider=OpenAIProvider(base_url=url, api_key="bench"))
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    return Runner(provider=provider)


def native(box: Path, runs: int, url: str | None) -> float:
    async def main() -> float:
        r, agent = runner(url), demo_agent("plan", box)
        began = time.perf_counter()
        for _ in range(runs):
            assert (await r.run(agent, demo_task("plan"))).status is Status.COMPLETED
        return (time.perf_counter() - began) / runs

    return trio.run(main)


def through_aio(box: Path, runs: int, url: str | None) -> float:
    async def main() -> float:
        r, agent = runner(url), demo_agent("plan", box)
        began = time.perf_counter()
        for _ in range(runs):
            assert (await aio.run(r, agent, demo_task("plan"))).status is Status.COMPLETED
        return (time.perf_counter() - began) / runs

    return asyncio.run(main())


def through_thread(box: Path, runs: int, url: str | None) -> float:
    """The other way in from asyncio: each run in a trio thread
    (``asyncio.to_thread(trio.run, ...)``): a new trio run per tree."""

    async def main() -> float:
        r, agent = runner(url), demo_agent("plan", box)

        async def one() -> None:
            assert (await r.run(agent, demo_task("plan"))).status is Status.COMPLETED

        began = time.perf_counter()
        for _ in range(runs):
            await asyncio.to_thread(trio.run, one)
        return (time.perf_counter() - began) / runs

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


def compare(box: Path, runs: int, rounds: int, url: str | None = None) -> None:
    """The three ways in, side by side after a warm-up round; one line each."""
    ways = {"native trio": native, "aio": through_aio, "trio thread": through_thread}
    for way in ways.values():  # warm-up round, not counted
        way(box, max(runs // 10, 1), url)
    took: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):  # side by side, alternating
        for name, way in ways.items():
            took[name].append(way(box, runs, url))
    base = statistics.median(took["native trio"])
    for name, times in took.items():
        median, best = statistics.median(times), min(times)
        print(
            f"{name:12} per run {median * 1000:.3f} ms (median of {rounds}), "
            f"{median / base:.2f}x native; best round {best / min(took['native trio']):.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--over", choices=("inprocess", "http", "both"), default="both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        box = make_sandbox(Path(tmp) / "box")
        if args.over in ("inprocess", "both"):
            print("scripted provider in process (mock transport):")
            compare(box, args.runs, args.rounds)
        if args.over in ("http", "both"):
            with scripted_server() as url:
                print(f"orchestra serve-scripted over loopback HTTP ({url}):")
                compare(box, args.runs, args.rounds, url)
        cancels = sorted(cancel_ms(box) for _ in range(3))
        print(
            f"cancel of the awaiting task, 20-run tree stopped: {cancels[1]:.1f} ms (median of 3)"
        )


if __name__ == "__main__":
    main()
