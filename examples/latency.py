"""Claim: the harness adds a few milliseconds per turn; the rest of the wall time is the model.

Runs the ``plan`` scenario (3 model calls: list the files, read errors.log,
answer) against the scripted provider answering after 0, 100 and 500 ms, and
prints the run's wall time next to N x latency (the time spent waiting for
the model) and the difference: the harness's own share (prompt counting,
budget reservation, saving the state, the tools, HTTP on loopback). The
provider runs in a child process (``serve_scripted(latency=...)``, one port
per latency), so its work is not counted as ours. Each row is the median of
3 runs, after a warm-up run (the first run of a process builds the
tokenizer).

Exits 1 unless every run took at least N x latency and the harness's share
stayed under 50 ms per turn at every latency.

    python examples/latency.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, Status, catalog
from orchestra.testing import make_sandbox

LATENCIES_MS = (0, 100, 500)
REPEATS = 3
MAX_HARNESS_MS_PER_TURN = 50.0
INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."


SERVE = """
import sys
from functools import partial

import trio

from orchestra.testing import serve_scripted


async def main():
    async with trio.open_nursery() as nursery:
        for ms in sys.argv[1:]:
            url = await nursery.start(partial(serve_scripted, latency=int(ms) / 1000))
            print(ms, url, flush=True)


trio.run(main)
"""


@contextmanager
def scripted_process(latencies_ms: tuple[int, ...]) -> Iterator[dict[int, str]]:
    """The scripted provider in a child process, one port per latency; yields their URLs."""
    argv = [sys.executable, "-c", SERVE, *map(str, latencies_ms)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    try:
        urls = {}
        for _ in latencies_ms:
            ms, url = server.stdout.readline().split()
            urls[int(ms)] = url
        yield urls
    finally:
        server.terminate()
        server.wait()
        server.stdout.close()


async def timed_runs(url: str, directory: Path, repeats: int) -> tuple[list[float], int]:
    """Wall seconds of ``repeats`` plan runs, and their model calls (each the same)."""
    provider = OpenAIProvider(base_url=url, api_key="scripted")
    runner = Runner(provider=provider)
    agent = Agent(
        name="assistant",
        model="plan",
        instructions=INSTRUCTIONS,
        tools=catalog(directory),
        limits=Limits(max_turns=10),
    )
    walls, calls = [], 0
    for _ in range(repeats):
        started = trio.current_time()
        result = await runner.run(agent, "Why did the nightly job fail?")
        walls.append(trio.current_time() - started)
        if result.status is not Status.COMPLETED:
            raise SystemExit(f"CLAIM FAILED: the plan run ended {result.status.value}")
        calls = result.state.own.model_calls
    await provider.aclose()
    return walls, calls


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="latency-") as tmp:
        return measure(make_sandbox(tmp))


def measure(directory: Path) -> int:
    print(f"plan at three provider latencies (median of {REPEATS} runs)")
    print(
        f"{'latency ms':>10} {'calls':>5} {'wall ms':>8} {'N x lat ms':>10} "
        f"{'harness ms':>10} {'per turn':>8}"
    )
    ok = True
    with scripted_process(LATENCIES_MS) as urls:
        trio.run(timed_runs, urls[LATENCIES_MS[0]], directory, 1)  # warm-up
        rows = {ms: trio.run(timed_runs, urls[ms], directory, REPEATS) for ms in LATENCIES_MS}
    for latency_ms, (walls, calls) in rows.items():
        wall_ms = statistics.median(walls) * 1000
        waiting_ms = calls * latency_ms
        harness_ms = wall_ms - waiting_ms
        print(
            f"{latency_ms:>10} {calls:>5} {wall_ms:>8.1f} {waiting_ms:>10} "
            f"{harness_ms:>10.1f} {harness_ms / calls:>8.1f}"
        )
        ok = ok and min(walls) * 1000 >= waiting_ms
        ok = ok and harness_ms / calls < MAX_HARNESS_MS_PER_TURN
    print("harness = wall - N x latency: prompt counting, budget, saves, tools, HTTP")
    if not ok:
        print("CLAIM FAILED: a run beat the latency, or the harness took too long")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
