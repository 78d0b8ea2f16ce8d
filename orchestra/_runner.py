"""The runner: starts runs, runs children, records every exit.

Cancellation: every run executes inside its own cancel scope, nested in its
parent's, so cancelling a run reaches every descendant, every model request
and every tool in flight. A run that is cancelled or hits its deadline still
records exactly one exit (``interrupted`` / ``deadline_exceeded``) and saves
its state; saving is synchronous, so no cancel can tear it.
"""

from __future__ import annotations

import time
import traceback
import uuid
from typing import Any

import attrs
import trio

from ._agent import Agent
from ._budget import Margin, carve
from ._events import Event, EventSink
from ._exceptions import ConfigError, StateError
from ._loop import drive
from ._money import PriceTable
from ._provider import Provider
from ._result import RunResult, stop_sentence
from ._run import Exit, LiveRun
from ._state import (
    Interruption,
    InterruptionKind,
    LimitRaise,
    Limits,
    RunState,
    Status,
    Usage,
)
from ._store import MemoryStore, Store

__all__ = ["Runner"]


def new_run_id() -> str:
    """A fresh run id."""
    return "run_" + uuid.uuid4().hex[:16]


@attrs.define(kw_only=True, eq=False)
class Runner:
    """Runs agents against a provider, keeping their states in a store.

    Attributes:
        provider: where model calls go.
        prices: USD per million tokens, by model.
        store: where states are saved after every step.
        sink: receives every event (e.g. a :class:`JsonlSink`).
        prompt_margin: slack on our prompt count when reserving budget.
    """

    provider: Provider
    prices: PriceTable = PriceTable()
    store: Store = attrs.Factory(MemoryStore)
    sink: EventSink | None = None
    prompt_margin: Margin = Margin()
    _clock_origin: tuple[float, float] | None = attrs.field(default=None, init=False)

    def now(self) -> float:
        """Wall-clock seconds, advancing with trio's clock (so a MockClock moves it too)."""
        if self._clock_origin is None:
            self._clock_origin = (time.time(), trio.current_time())
        wall, trio0 = self._clock_origin
        return wall + trio.current_time() - trio0

    def emit(self, event: Event) -> None:
        """Send an event to the sink."""
        if self.sink is not None:
            self.sink(event)

    # -- starting runs --------------------------------------------------------

    async def run(
        self, agent: Agent, task: str, *, limits: Limits | None = None, run_id: str | None = None
    ) -> RunResult:
        """Run ``agent`` on ``task`` as a root run until it stops; its result.

        Never raises for a run's own failure: how it ended is in the result.
        """
        run_id = run_id or new_run_id()
        state = RunState(
            run_id=run_id,
            root_id=run_id,
            agent=agent.name,
            model=agent.model,
            messages=_opening(agent, task),
            limits=(limits or agent.limits).anchored(self.now()),
        )
        live = LiveRun(state=state, agent=agent, runner=self)
        await execute(live)
        return result_of(live)

    async def resume(
        self, run_id: str, agent: Agent, *, limits: Limits | None = None, note: str = ""
    ) -> RunResult:
        """Continue a saved root run from where it stopped; its result.

        What was spent and the turns taken carry over: a run stopped by a limit
        stops again at once unless ``limits`` raises it. A raise is recorded in
        ``state.limit_raises``. Pending tool calls run first, on the same path
        as in a fresh run; saved model replies are never requested again.

        Raises:
            RunNotFound: no such run in the store.
            StateError: the run is a child run, or its status cannot be resumed.
        """
        state = self.store.load(run_id)
        if state.parent_id is not None:
            raise StateError(f"run {run_id} is a child run; resume its root {state.root_id}")
        live = LiveRun(state=state, agent=agent, runner=self)
        _reopen(live, limits, note)
        await execute(live)
        return result_of(live)

    async def spawn_child(
        self,
        parent: LiveRun,
        call_id: str,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
    ) -> str:
        """Run ``agent`` as a child of ``parent`` (for call ``call_id``); its answer as text.

        If this call already has a child (the parent was resumed), that child is
        resumed if it was waiting or interrupted, and otherwise its saved outcome
        is returned: a child is never run twice for one call.
        """
        existing = parent.state.children.get(call_id)
        if existing is not None:
            child = LiveRun(state=self.store.load(existing), agent=agent, runner=self, parent=parent)
            parent.children.append(child)
            if child.state.status in (Status.RUNNING, Status.INTERRUPTED):
                _reopen(child, None, "")
                await execute(child)
            return stop_sentence(result_of(child))
        carved = carve(parent, limits or agent.limits, self.now())
        if isinstance(carved, str):
            return f"{agent.name} was not started: {carved}."
        run_id = new_run_id()
        state = RunState(
            run_id=run_id,
            root_id=parent.state.root_id,
            parent_id=parent.state.run_id,
            parent_call_id=call_id,
            agent=agent.name,
            model=agent.model,
            messages=_opening(agent, task),
            limits=carved,
        )
        child = LiveRun(state=state, agent=agent, runner=self, parent=parent)
        parent.children.append(child)
        parent.state.children[call_id] = run_id
        parent.charge(Usage(child_runs=1))
        await execute(child)
        return stop_sentence(result_of(child))


def _reopen(run: LiveRun, limits: Limits | None, note: str) -> None:
    """Make a saved run ready to continue (recording any raise of its limits)."""
    state = run.state
    if not state.status.resumable:
        raise StateError(f"run {state.run_id} ended {state.status.value}; it cannot be resumed")
    if limits is not None:
        after = limits.anchored(run.runner.now())
        state.limit_raises.append(
            LimitRaise(at=run.runner.now(), before=state.limits, after=after, note=note)
        )
        state.limits = after
    state.status, state.reason, state.interruption, state.error = Status.RUNNING, "", None, None


def _opening(agent: Agent, task: str) -> list[dict[str, Any]]:
    if not isinstance(task, str) or not task.strip():
        raise ConfigError("a run needs a non-empty task")
    system = [{"role": "system", "content": agent.instructions}] if agent.instructions else []
    return [*system, {"role": "user", "content": task}]


def result_of(run: LiveRun) -> RunResult:
    """The result tree of a live run."""
    return RunResult(state=run.state, children=tuple(result_of(c) for c in run.children))


def _trio_deadline(run: LiveRun) -> float:
    deadline = run.state.limits.deadline
    own = float("inf") if deadline is None else trio.current_time() + deadline - run.runner.now()
    parent = run.parent.deadline if run.parent is not None else float("inf")
    return min(own, parent)


async def execute(run: LiveRun) -> None:
    """Drive ``run`` inside its own cancel scope and record exactly one exit.

    Cancellation: if an enclosing scope is cancelled, the run records
    ``interrupted`` (or ``deadline_exceeded``) and saves before ``Cancelled``
    propagates; if its own scope is cancelled (its deadline, or a cancel aimed
    at it), it records the same and returns normally.
    """
    run.deadline = _trio_deadline(run)
    run.emit(
        "run_started",
        agent=run.state.agent,
        model=run.state.model,
        limits=attrs.asdict(run.state.limits),
    )
    run.checkpoint()
    started = trio.current_time()
    try:
        with trio.CancelScope(deadline=run.deadline) as run.scope:
            await drive(run)
    except Exception as exc:  # a bug or a broken dependency: the run fails, as data
        run.finish(
            Exit(
                status=Status.FAILED,
                reason=f"internal error: {exc!r}",
                error="".join(traceback.format_exception(exc)),
            )
        )
    finally:
        run.state.elapsed_s += trio.current_time() - started
        if run.state.status is Status.RUNNING:
            run.finish(stopped_exit(run))


def stopped_exit(run: LiveRun) -> Exit:
    """The exit of a run whose scope (or an enclosing one) was cancelled."""
    for node in run.lineage():
        if node.cancel_reason is not None:
            return _cancelled(node.cancel_reason)
    if trio.current_time() >= run.deadline:
        return Exit(
            status=Status.DEADLINE_EXCEEDED, reason="deadline reached" + _deadline_owner(run)
        )
    return _cancelled("cancelled from outside the run")


def _deadline_owner(run: LiveRun) -> str:
    own = run.state.limits.deadline
    return "" if own is not None and run.parent is None else " (the run tree's deadline)"


def _cancelled(reason: str) -> Exit:
    interruption = Interruption(kind=InterruptionKind.CANCELLED, reason=reason)
    return Exit(status=Status.INTERRUPTED, reason=reason, interruption=interruption)
