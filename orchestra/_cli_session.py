"""Running a tree from the command line: signals, live progress, the report.

Ctrl-C (or SIGTERM) cancels the whole tree gracefully the first time: every
run records ``interrupted`` and is saved, and the summary is printed. A second
one exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import IO, Any

import attrs
import trio

from ._cli_recipe import Recipe
from ._events import Event, EventSink, JsonlSink, fanout
from ._result import RunResult
from ._runner import Runner
from ._state import RunState, Status
from ._store import Store

__all__ = ["EXIT_CODES", "Progress", "report", "supervise", "tree_result"]

EXIT_CODES = {
    Status.COMPLETED: 0,
    Status.FAILED: 1,
    Status.MAX_TURNS_EXCEEDED: 3,
    Status.BUDGET_EXCEEDED: 4,
    Status.DEADLINE_EXCEEDED: 5,
    Status.INTERRUPTED: 6,
    Status.RUNNING: 7,
}


class Progress:
    """Shows the latest progress of running tools on one terminal line."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def __call__(self, event: Event) -> None:
        if event.type == "tool_progress":
            d = event.data
            line = (
                f"  {d['tool']} [{event.run_id[-6:]}] {d['label']} ({d['elapsed_ms'] / 1000:.1f} s)"
            )
            self._stream.write("\r\033[K" + line)
            self._stream.flush()
        elif event.type in ("tool_result", "run_stopped"):
            self._stream.write("\r\033[K")
            self._stream.flush()


class Warnings:
    """Says on stderr what a tree only assumed (a price), once per message."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._said: set[str] = set()

    def __call__(self, event: Event) -> None:
        message = event.data.get("message") if event.type == "price_warning" else None
        if message and message not in self._said:
            self._said.add(message)
            print(f"warning: {message}", file=self._stream)


def _progress_sink() -> EventSink | None:
    return Progress(sys.stderr) if sys.stderr.isatty() else None


async def _signals(runner: Runner, root_id: str) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        count = 0
        async for signum in received:
            count += 1
            if count > 1:
                os._exit(130)
            name = signal.Signals(signum).name
            print(f"\n{name}: stopping the run tree (again to exit at once)", file=sys.stderr)
            runner.cancel(root_id, f"interrupted by {name}")


async def _cancel_later(runner: Runner, root_id: str, seconds: float) -> None:
    await trio.sleep(seconds)
    runner.cancel(root_id, "user pressed Stop")


@attrs.frozen(kw_only=True)
class Session:
    """What one CLI process runs: a recipe against a store."""

    recipe: Recipe
    store: Store
    trace: str | None = None
    api_key: str = ""
    cancel_after: float | None = None
    tracer: Any = None


async def supervise(
    session: Session, root_id: str, go: Callable[[Runner], Awaitable[RunResult]]
) -> tuple[RunResult, float]:
    """Run ``go`` with signal handling and progress; its result and elapsed ms."""
    trace = None
    if session.trace:
        trace = JsonlSink(sys.stderr) if session.trace == "-" else JsonlSink(path=session.trace)
    async with session.recipe.provider(session.api_key) as provider:
        runner = Runner(
            provider=provider,
            store=session.store,
            sink=fanout(trace, _progress_sink(), Warnings(sys.stderr)),
            tracer=session.tracer,
            prices=session.recipe.prices(),
            prompt_margin=session.recipe.money().margin(),
        )
        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_signals, runner, root_id)
            if session.cancel_after is not None:
                nursery.start_soon(_cancel_later, runner, root_id, session.cancel_after)
            result = await go(runner)
            nursery.cancel_scope.cancel()
        elapsed = (trio.current_time() - started) * 1000
    if trace:
        trace.close()
    return result, elapsed


def tree_result(states: list[RunState], root_id: str) -> RunResult:
    """A result tree from saved states (as ``store.tree`` returns them)."""
    by_parent: dict[str | None, list[RunState]] = {}
    for state in states:
        by_parent.setdefault(state.parent_id, []).append(state)

    def build(state: RunState) -> RunResult:
        kids = by_parent.get(state.run_id, [])
        return RunResult(state=state, children=tuple(build(k) for k in kids))

    root = next(s for s in states if s.run_id == root_id)
    return build(root)


def report(
    result: RunResult, store: Store, elapsed_ms: float | None, directory: str | None
) -> dict[str, Any]:
    """The JSON report of a tree, with per-turn prompt tokens and model retries
    from every process's events."""
    prompts: dict[str, list[int]] = {}
    retries: dict[str, int] = {}
    for event in store.events(root_id=result.state.root_id):
        if event["type"] == "turn":
            prompts.setdefault(event["run_id"], []).append(int(event["prompt_tokens"]))
        elif event["type"] == "model_retry":
            retries[event["run_id"]] = retries.get(event["run_id"], 0) + 1

    def add_turns(summary: dict[str, Any]) -> dict[str, Any]:
        summary["per_turn_prompt_tokens"] = prompts.get(summary["run_id"], [])
        summary["model_retries"] = retries.get(summary["run_id"], 0)
        summary["children"] = [add_turns(c) for c in summary["children"]]
        return summary

    out = add_turns(result.summary())
    out["elapsed_ms"] = None if elapsed_ms is None else round(elapsed_ms, 1)
    out["total_elapsed_ms"] = round(result.state.elapsed_s * 1000, 1)
    out["dir"] = directory
    parent = result.state.trace_context.get("traceparent", "")
    out["trace_id"] = parent.split("-")[1] if parent.count("-") == 3 else None
    return out
