"""Running a tree from the command line: signals, live progress, the report.

Ctrl-C (or SIGTERM) cancels the whole tree gracefully the first time: every
run records ``interrupted`` and is saved, and the summary is printed. A second
one exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import IO, Any

import attrs
import trio

from .._events import Event, EventSink, JsonlSink, fanout
from .._exceptions import RunNotFound
from .._result import RunResult, child_order
from .._runner import Runner
from .._state import RunState, Status
from .._stores.memory import Store
from .._tools import Tool
from .recipe import Recipe

__all__ = ["report", "supervise", "tree_result"]


class Warnings:
    """Says on stderr what a tree only assumed (a price), once per message.

    Without a stream it writes to whatever ``sys.stderr`` is at the time (the
    live view lets such lines through above itself).
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._said: set[str] = set()

    def __call__(self, event: Event) -> None:
        message = event.data.get("message") if event.type == "price_warning" else None
        if message and message not in self._said:
            self._said.add(message)
            print(f"warning: {message}", file=self._stream or sys.stderr)


async def _signals(runner: Runner, root_id: str) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        count = 0
        async for signum in received:
            count += 1
            if count > 1:
                if sys.__stderr__ is not None and sys.__stderr__.isatty():
                    sys.__stderr__.write("\033[?25h\n")  # the live view hid the cursor
                    sys.__stderr__.flush()
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
    live: bool = False
    """Draw the tree's progress on stderr while it runs (only if stderr is a terminal)."""


@contextlib.contextmanager
def _live_view(session: Session) -> Iterator[EventSink | None]:
    """The live view's event sink while the tree runs, or None; cleared on exit."""
    if not session.live or session.trace == "-" or not sys.stderr.isatty():
        yield None
        return
    from .live import live_tree

    with live_tree() as sink:
        yield sink


async def supervise(
    session: Session, root_id: str, go: Callable[[Runner, tuple[Tool, ...]], Awaitable[RunResult]]
) -> tuple[RunResult, float]:
    """Run ``go`` with signal handling and the live view, given the recipe's MCP
    tools (connected for the run); its result and elapsed ms.

    The live view (if any) is cleared before this returns.
    """
    trace = None
    if session.trace:
        trace = JsonlSink(sys.stderr) if session.trace == "-" else JsonlSink(path=session.trace)
    with _live_view(session) as live:
        async with (
            session.recipe.provider(session.api_key) as provider,
            session.recipe.mcp_tools() as mcp_tools,
        ):
            if mcp_tools:
                names = ", ".join(t.name for t in mcp_tools)
                print(f"mcp: {names} (from {len(session.recipe.mcp)} server(s))", file=sys.stderr)
            runner = Runner(
                provider=provider,
                store=session.store,
                sink=fanout(trace, live, Warnings()),
                tracer=session.tracer,
                prices=session.recipe.prices(),
                prompt_margin=session.recipe.money().margin(),
            )
            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_signals, runner, root_id)
                if session.cancel_after is not None:
                    nursery.start_soon(_cancel_later, runner, root_id, session.cancel_after)
                result = await go(runner, mcp_tools)
                nursery.cancel_scope.cancel()
            elapsed = (trio.current_time() - started) * 1000
    if trace:
        trace.close()
    return result, elapsed


def tree_result(states: list[RunState], root_id: str) -> RunResult:
    """A result tree from saved states (as ``store.tree`` returns them), each
    run's children in the order of the calls that started them."""
    by_parent: dict[str | None, list[RunState]] = {}
    for state in states:
        by_parent.setdefault(state.parent_id, []).append(state)

    def build(state: RunState) -> RunResult:
        kids = sorted(by_parent.get(state.run_id, []), key=child_order(state))
        return RunResult(state=state, children=tuple(build(k) for k in kids))

    root = next(s for s in states if s.run_id == root_id)
    return build(root)


def report(
    result: RunResult, store: Store, elapsed_ms: float | None, directory: str | None
) -> dict[str, Any]:
    """The JSON report of a tree, with what every process's events add: per-turn
    prompt tokens, model retries, the human decision on each call that asked
    for one, and the time the root ran."""
    result = with_stored_children(result, store)
    events: dict[str, list[dict[str, Any]]] = {}
    for event in store.events(root_id=result.state.root_id):
        events.setdefault(event["run_id"], []).append(event)
    states = {r.run_id: r.state for r in result.walk()}

    def add(summary: dict[str, Any]) -> dict[str, Any]:
        own = events.get(summary["run_id"], [])
        summary["per_turn_prompt_tokens"] = [
            int(e["prompt_tokens"]) for e in own if e["type"] == "turn"
        ]
        summary["model_retries"] = sum(e["type"] == "model_retry" for e in own)
        summary["decisions"] = decisions(states[summary["run_id"]], own)
        summary["children"] = [add(c) for c in summary["children"]]
        return summary

    out = add(result.summary())
    ran_s = max(result.state.elapsed_s, _ran_s(events.get(result.run_id, [])))
    out["elapsed_ms"] = None if elapsed_ms is None else round(elapsed_ms, 1)
    out["total_elapsed_ms"] = round(ran_s * 1000, 1)
    out["dir"] = directory
    parent = result.state.trace_context.get("traceparent", "")
    out["trace_id"] = parent.split("-")[1] if parent.count("-") == 3 else None
    return out


def with_stored_children(result: RunResult, store: Store) -> RunResult:
    """``result`` with the children it has in the store but not in memory: a
    resumed run's children that finished in an earlier process."""
    have = {child.run_id: child for child in result.children}
    kids = []
    for child_id in result.state.children.values():
        child = have.pop(child_id, None)
        if child is None:
            try:
                child = RunResult(state=store.load(child_id))
            except RunNotFound:  # bound to its call, but the process died before its first save
                continue
        kids.append(with_stored_children(child, store))
    kids += [with_stored_children(child, store) for child in have.values()]
    return attrs.evolve(result, children=tuple(kids))


def _ran_s(events: list[dict[str, Any]]) -> float:
    """Seconds a run ran, from its ``run_started``/``run_stopped`` pairs (every
    process that ran it); a start with no stop (a crash) counts nothing."""
    total, started = 0.0, None
    for event in events:
        if event["type"] == "run_started":
            started = event["at"]
        elif event["type"] == "run_stopped" and started is not None:
            total += max(event["at"] - started, 0.0)
            started = None
    return total


def decisions(state: RunState, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call of this run that waited for a human, and what was decided.

    ``decision`` is ``approved``, ``rejected``, ``waiting`` (nobody decided
    yet) or ``undecided`` (the run stopped otherwise); ``done`` says whether a
    resume has acted on it (the approved call started, the rejection was
    answered to the model).
    """
    asked: dict[str, tuple[int, dict[str, Any]]] = {}
    for index, event in enumerate(events):
        waiting = event.get("interruption") if event["type"] == "run_stopped" else None
        if waiting is not None and _asks(waiting, state.run_id):
            asked.pop(waiting["call_id"], None)  # asked again: this is the latest
            asked[waiting["call_id"]] = (index, waiting)
    current = state.interruption.to_dict() if state.interruption else None
    if current is not None and _asks(current, state.run_id) and current["call_id"] not in asked:
        asked[current["call_id"]] = (len(events), current)
    return [_decision(state, events, since, waiting) for since, waiting in asked.values()]


def _asks(interruption: dict[str, Any], run_id: str) -> bool:
    return (
        interruption.get("kind") in ("approval", "unknown_outcome")
        and interruption.get("run_id") == run_id
        and bool(interruption.get("call_id"))
    )


def _decision(
    state: RunState, events: list[dict[str, Any]], since: int, waiting: dict[str, Any]
) -> dict[str, Any]:
    call_id = waiting["call_id"]
    later = [e for e in events[since:] if e.get("call_id") == call_id]
    started = any(e["type"] == "tool_start" for e in later)
    answered = any(e["type"] == "tool_result" and e.get("decided") for e in later)
    reason = None
    if call_id in state.rejections:
        decision, done, reason = "rejected", answered, state.rejections[call_id] or None
    elif started or any(a.call_id == call_id for a in state.approvals):
        decision, done = "approved", started
    else:
        now = state.interruption if state.status is Status.INTERRUPTED else None
        decision = "waiting" if now is not None and now.call_id == call_id else "undecided"
        done = False
    return {
        "call_id": call_id,
        "tool": waiting.get("tool"),
        "arguments": waiting.get("arguments"),
        "kind": waiting.get("kind"),
        "asked": waiting.get("reason", ""),
        "decision": decision,
        "reason": reason,
        "done": done,
    }
