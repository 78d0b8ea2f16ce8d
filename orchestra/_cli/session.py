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
from .._recipes.recipe import Recipe
from .._result import RunResult
from .._runner import Runner
from .._stores.contract import Store
from .._tools import Tool

__all__ = ["Session", "followed", "supervise"]


class Notices:
    """Says on stderr, as it happens, what a tree only assumed (a price, once per
    message) and each model call retried (cause, attempt, wait).

    Without a stream it writes to whatever ``sys.stderr`` is at the time (the
    live view lets such lines through above itself).
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._said: set[str] = set()

    def __call__(self, event: Event) -> None:
        if event.type == "model_retry":
            data = event.data
            self._say(
                f"retry: run {event.run_id[:12]}, attempt {data['attempt']} in "
                f"{data['wait_s']:.1f} s after: {data['error']}"
            )
            return
        message = event.data.get("message") if event.type == "price_warning" else None
        if message and message not in self._said:
            self._said.add(message)
            self._say(f"warning: {message}")

    def _say(self, line: str) -> None:
        print(line, file=self._stream or sys.stderr)


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
    json_events: bool = False
    """Print every event, text deltas included, as JSON lines on stdout."""
    chunk_s: float = 0.0
    """A demo's scripted server waits this long before each chunk of a streamed reply."""


def _events_out(session: Session) -> EventSink | None:
    """``--json-events``: every event, text deltas included, as a JSON line on
    stdout, with its run's ``depth`` in the tree (0: the root)."""
    if not session.json_events:
        return None
    lines = JsonlSink(sys.stdout, deltas=True)
    return lambda event: lines(attrs.evolve(event, data={**event.data, "depth": event.depth}))


@contextlib.contextmanager
def _live_view(session: Session) -> Iterator[EventSink | None]:
    """The live view's event sink while the tree runs, or None; cleared on exit."""
    if not session.live or session.trace == "-" or not sys.stderr.isatty():
        yield None
        return
    from .._views.live import live_tree

    with live_tree() as sink:
        yield sink


@contextlib.contextmanager
def followed(session: Session) -> Iterator[EventSink | None]:
    """What follows a tree executed elsewhere (on workers): ``--trace``, the live
    view, notices and ``--json-events``, as :func:`supervise` gives them to its
    runner; None when none of the first three is asked for (notices alone follow
    nothing)."""
    trace = None
    if session.trace:
        trace = JsonlSink(sys.stderr) if session.trace == "-" else JsonlSink(path=session.trace)
    try:
        with _live_view(session) as live:
            out = _events_out(session)
            yield fanout(trace, live, Notices(), out) if trace or live or out else None
    finally:
        if trace:
            trace.close()


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
            session.recipe.provider(session.api_key, session.chunk_s) as provider,
            session.recipe.mcp_tools() as mcp_tools,
        ):
            if mcp_tools:
                names = ", ".join(t.name for t in mcp_tools)
                print(f"mcp: {names} (from {len(session.recipe.mcp)} server(s))", file=sys.stderr)
            calls = session.recipe.model_calls()
            runner = Runner(
                provider=provider,
                store=session.store,
                sink=fanout(trace, live, Notices(), _events_out(session)),
                tracer=session.tracer,
                prices=calls.prices,
                retry=calls.retry,
                prompt_margin=calls.margin,
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
