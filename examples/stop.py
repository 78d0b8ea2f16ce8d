"""Claim: Stop ends a run inside a slow tool within milliseconds, and keeps what was spent.

Runs the ``slow`` scenario: the scripted model calls ``scan_archive``, a 3 s
scan that reports progress, then quotes its result. Two runs side by side:
one without Stop (it ends after about 3 s, completed) and one with Stop
pressed 1.2 s after it started (``RunHandle.cancel``): the tool is inside
the run's trio cancel scope, so the scan stops at its next checkpoint and
the run ends ``interrupted`` with the reason, keeping the spend of its first
model call and the progress made until then.

Prints when Stop was pressed, when the run stopped (both from the run's
start), the gap, the scan's last progress, the status and the spend. Exits 1
unless the stopped run ended interrupted less than 100 ms after Stop.

    python examples/stop.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import attrs
import trio

from orchestra import Agent, Event, Limits, OpenAIProvider, Runner, RunResult, Status, catalog
from orchestra.testing import demo_tools, make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
STOP_AT = 1.2
MAX_GAP_MS = 100.0


@attrs.define
class Timing:
    stop_pressed: float | None = None
    stopped: float | None = None
    progress: str = "-"


async def scan(
    provider: OpenAIProvider, directory: Path, stop_at: float | None
) -> tuple[RunResult, Timing]:
    timing = Timing()
    started = trio.current_time()

    def sink(event: Event) -> None:
        if event.type == "tool_progress":
            label = str(event.data.get("label", ""))
            timing.progress = label.removeprefix("scanned ").removesuffix(" files")
        elif event.type == "run_stopped":
            timing.stopped = trio.current_time() - started

    runner = Runner(provider=provider, sink=sink)
    agent = Agent(
        name="assistant",
        model="slow",
        instructions=INSTRUCTIONS,
        tools=demo_tools(directory),
        limits=Limits(max_turns=10),
    )
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, "Search the archive for timeouts.")
        if stop_at is not None:
            await trio.sleep_until(started + stop_at)
            timing.stop_pressed = trio.current_time() - started
            handle.cancel("user pressed Stop")
        result = await handle.wait()
    return result, timing


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


async def both(directory: Path) -> dict[str, tuple[RunResult, Timing]]:
    """The run without Stop and the one with, side by side (after a warm-up run)."""
    rows: dict[str, tuple[RunResult, Timing]] = {}

    async def row(label: str, stop_at: float | None) -> None:
        rows[label] = await scan(provider, directory, stop_at)

    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        warm_up = Agent(name="warm-up", model="plan", tools=catalog(directory))
        await Runner(provider=provider).run(warm_up, "Warm up.")  # builds the tokenizer
        async with trio.open_nursery() as nursery:
            nursery.start_soon(row, "no Stop", None)
            nursery.start_soon(row, f"Stop at {STOP_AT} s", STOP_AT)
        await provider.aclose()
    return {label: rows[label] for label in ("no Stop", f"Stop at {STOP_AT} s")}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="stop-") as tmp:
        rows = trio.run(both, make_sandbox(tmp))
    print("slow: a 3 s archive scan (scan_archive), times from the run's start")
    print(
        f"{'':<13} {'Stop':>7} {'stopped':>7} {'gap ms':>6} {'scanned':>9} "
        f"{'status':<11} {'spend USD':>9}"
    )
    for label, (result, t) in rows.items():
        gap = "-"
        if t.stop_pressed is not None and t.stopped is not None:
            gap = f"{(t.stopped - t.stop_pressed) * 1000:.1f}"
        print(
            f"{label:<13} {seconds(t.stop_pressed):>7} {seconds(t.stopped):>7} {gap:>6} "
            f"{t.progress:>9} {result.status.value:<11} {result.tree_cost_usd:>9.6f}"
        )
    result, t = rows[f"Stop at {STOP_AT} s"]
    print(f"reason: {result.state.reason!r}; turns: {result.state.turns}")
    held = (
        result.status is Status.INTERRUPTED
        and t.stop_pressed is not None
        and t.stopped is not None
        and (t.stopped - t.stop_pressed) * 1000 < MAX_GAP_MS
        and result.tree_cost_usd > 0
    )
    if not held:
        print(f"CLAIM FAILED: the run did not stop within {MAX_GAP_MS:.0f} ms of Stop")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
