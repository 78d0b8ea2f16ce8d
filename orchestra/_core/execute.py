"""Executing one run of the tree: its scope, its exit, its children.

Cancellation: every run executes inside its own cancel scope, nested in its
parent's, so cancelling a run reaches every descendant, every model request
and every tool in flight. A run that is cancelled or hits its deadline still
records exactly one exit (``interrupted`` / ``deadline_exceeded``) and saves
its state before ``Cancelled`` goes on; saving is synchronous, so no cancel
can tear it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import attrs
import trio

from .._agent import Agent
from .._conversation import continued_messages, refuse_to_continue
from .._deps import RunContext, check_deps
from .._exceptions import ConfigError, RunNotFound, StateError
from .._result import RunResult, stop_sentence
from .._settings import ModelSettings
from .._state import Interruption, InterruptionKind, LimitRaise, Limits, RunState, Status, Usage
from .._storable import problem
from .fair import fair_carve, give_back
from .loop import charge_lost_stream, drive
from .run import ChildWaiting, Exit, Host, LiveRun
from .shape import running_slot
from .top_up import answered_by_parent

__all__ = [
    "IN_PROCESS",
    "Children",
    "child_answer",
    "execute",
    "instruct",
    "instruct_state",
    "new_run_id",
    "new_state",
    "reopen",
    "reopen_state",
    "result_of",
    "spawn_child",
    "trio_deadline",
]


def new_run_id() -> str:
    """A fresh run id."""
    return "run_" + uuid.uuid4().hex[:16]


def new_state(
    agent: Agent,
    task: str,
    limits: Limits,
    parent: LiveRun | None = None,
    call_id: str | None = None,
    run_id: str | None = None,
    metadata: dict[str, str] | None = None,
    settings: ModelSettings | None = None,
) -> RunState:
    """The state of a run that has not started yet (``settings``: the run's own,
    over its agent's).

    Raises:
        ConfigError: ``task`` is empty or not valid Unicode (a lone surrogate).
    """
    if not isinstance(task, str) or not task.strip():
        raise ConfigError("a run needs a non-empty task")
    if (found := problem(task)) is not None:
        raise ConfigError(f"the task cannot be kept: {found}")
    static = agent.instructions if isinstance(agent.instructions, str) else ""
    system = [{"role": "system", "content": static}] if static else []
    run_id = run_id or new_run_id()
    return RunState(
        run_id=run_id,
        root_id=parent.state.root_id if parent else run_id,
        parent_id=parent.state.run_id if parent else None,
        parent_call_id=call_id,
        agent=agent.name,
        model=agent.model,
        limits=limits,
        messages=[*system, {"role": "user", "content": task}],
        metadata=dict(metadata or {}),
        settings=_kept(agent.settings if settings is None else settings.over(agent.settings)),
    )


def instruct(run: LiveRun) -> None:
    """Put the system message of ``run``, a new run whose agent's instructions are a
    function, first in its transcript (called once its limits are final).

    Raises:
        ConfigError: the instructions failed (see :meth:`Agent.instructions_for`).
    """
    depth, spent = len(run.lineage()) - 1, run.lineage()[-1].state.tree.cost_usd
    instruct_state(run.state, run.agent, run.deps, depth, spent)


def instruct_state(
    state: RunState, agent: Agent, deps: object, depth: int, tree_spent_usd: float
) -> None:
    """:func:`instruct` for a state alone (a root submitted to workers)."""
    if isinstance(agent.instructions, str):
        return  # written by new_state
    context = RunContext(
        deps=deps,
        run_id=state.run_id,
        agent=agent.name,
        task=state.messages[-1]["content"],
        depth=depth,
        limits=state.limits,
        tree_spent_usd=tree_spent_usd,
    )
    text = agent.instructions_for(context)
    if text:
        state.messages.insert(0, {"role": "system", "content": text})


def _kept(settings: ModelSettings) -> ModelSettings | None:
    """What a state keeps of ``settings``: None if nothing is set."""
    return None if settings.empty else settings


def reopen(run: LiveRun, limits: Limits | None, note: str) -> None:
    """Make a saved run ready to continue (recording any raise of its limits).

    Raises:
        StateError: the run's status cannot be resumed.
    """
    reopen_state(run.state, limits, note, run.runner.now)


def reopen_state(
    state: RunState, limits: Limits | None, note: str, now: Callable[[], float]
) -> None:
    """:func:`reopen` for a state alone (``now``: the wall clock, read only for a raise).

    Raises:
        StateError: the run's status cannot be resumed.
    """
    if not state.status.resumable:
        raise StateError(f"run {state.run_id} ended {state.status.value}; it cannot be resumed")
    if limits is not None:
        at = now()
        after = limits.anchored(at)
        state.limit_raises.append(LimitRaise(at=at, before=state.limits, after=after, note=note))
        state.limits = after
    state.status, state.reason, state.interruption, state.error = Status.RUNNING, "", None, None
    state.answer_partial = False  # a wound-down run that goes on answers again
    state.awaiting.clear()  # resumed: so are its interrupted children


def load_live(
    runner: Host, run_id: str, agent: Agent, parent: LiveRun | None, deps: object = None
) -> LiveRun:
    """A saved run, live again, with its tree usage recounted from its descendants
    (``deps``: a root's dependencies; a child has its parent's).

    A process can die after a descendant saved its spend but before an ancestor
    did; recounting from each run's own usage makes the tree totals exact again.
    """
    state = runner.store.load(run_id)
    state.tree = _tree_usage(runner, state)
    given = deps if parent is None else parent.deps
    return LiveRun(state=state, agent=agent, runner=runner, parent=parent, deps=given)


def _tree_usage(runner: Host, state: RunState) -> Usage:
    """Own usage of ``state`` and of every saved descendant (a child bound but
    never saved, because the process died in between, has spent nothing)."""
    total = state.own
    for child_id in state.children.values():
        try:
            child = runner.store.load(child_id)
        except RunNotFound:
            continue
        total = total + _tree_usage(runner, child)
    return total


def continued_state(
    earlier: RunState,
    agent: Agent,
    message: str,
    limits: Limits,
    run_id: str | None = None,
    metadata: dict[str, str] | None = None,
    settings: ModelSettings | None = None,
) -> RunState:
    """The state of a new root run continuing ``earlier`` with ``message`` (see
    :mod:`orchestra._conversation`); the earlier run's metadata unless given.

    Raises:
        StateError: ``earlier`` cannot be continued by ``agent``.
    """
    refuse_to_continue(earlier, agent.name)
    state = new_state(
        agent, message, limits, None, None, run_id, metadata or earlier.metadata, settings
    )
    state.messages = continued_messages(earlier, message)
    state.continues, state.conversation_id = earlier.run_id, earlier.conversation
    return state


def result_of(run: LiveRun) -> RunResult:
    """The result tree of a live run (its output built into the agent's output class)."""
    spec, value = run.agent.output, run.state.output
    output = spec.build(value) if spec is not None and value is not None else value
    children = tuple(result_of(c) for c in run.children)
    return RunResult(state=run.state, children=children, output=output)


class Children(Protocol):
    """Where a host's child runs execute: what :func:`spawn_child` leaves to it.

    In this process (:data:`IN_PROCESS`, the default), inline in a worker's step
    (:class:`~orchestra.distributed._host.Inline`) or queued to workers
    (:class:`~orchestra.distributed._host.OnWorkers`); either way a child is
    bound to its parent's call by the one path in :func:`spawn_child`.
    """

    async def carve(
        self, parent: LiveRun, call_id: str, child: RunState, agent: Agent
    ) -> Limits | str:
        """The limits of ``child`` (a run of ``agent``, made with the limits it asks
        for) carved from what ``parent`` has left (:func:`~orchestra._core.fair.fair_carve`),
        or why it is not started."""
        ...

    def admission(
        self, parent: LiveRun, call_id: str
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while a new child of ``parent`` for ``call_id`` is carved and bound:
        where children run elsewhere, the turn of a child over its parent's
        ``max_concurrent_children`` (it waits, or raises :class:`ChildPending` with
        a running sibling's id: the call parks until the running ones end)."""
        ...

    async def reattach(self, parent: LiveRun, child_id: str, agent: Agent) -> LiveRun | None:
        """The saved child bound to a call of ``parent``; None if it was never saved."""
        ...

    async def open(self, parent: LiveRun, child: LiveRun, *, bind: bool) -> None:
        """Make a new ``child`` durable; with ``bind``, bind it to its call first
        (saved with the parent before the child exists) and count it."""
        ...

    async def run(self, child: LiveRun) -> None:
        """Run ``child`` to its end if it is going on or interrupted (``child.state``
        is then its end); a finished one is left as it is. In this process, it
        holds one of its parent's ``max_concurrent_children`` slots meanwhile and
        gives back what its share did not spend."""
        ...


class _InProcess:
    """Children executing inside their parent's tool call, in this process."""

    async def carve(
        self, parent: LiveRun, call_id: str, child: RunState, agent: Agent
    ) -> Limits | str:
        return carve_child(parent, call_id, child, agent, parent.runner.now())

    def admission(
        self, parent: LiveRun, call_id: str
    ) -> contextlib.AbstractAsyncContextManager[None]:
        return _admitted()  # in this process, a child waits for a slot as it runs

    async def reattach(self, parent: LiveRun, child_id: str, agent: Agent) -> LiveRun | None:
        try:
            return load_live(parent.runner, child_id, agent, parent)
        except RunNotFound:
            return None

    async def open(self, parent: LiveRun, child: LiveRun, *, bind: bool) -> None:
        if bind:
            parent.state.children[child.state.parent_call_id or ""] = child.state.run_id
            parent.charge(Usage(child_runs=1))
            parent.checkpoint()

    async def run(self, child: LiveRun) -> None:
        parent = child.parent
        assert parent is not None
        if child.state.status in (Status.RUNNING, Status.INTERRUPTED):
            async with running_slot(parent):
                reopen(child, None, "")
                await execute(child)
        give_back(parent, child)


@contextlib.asynccontextmanager
async def _admitted() -> AsyncIterator[None]:
    yield


IN_PROCESS: Children = _InProcess()
"""Children run inside their parent's call, in this process (embedded)."""


async def spawn_child(
    runner: Host,
    parent: LiveRun,
    call_id: str,
    agent: Agent,
    task: str,
    *,
    limits: Limits | None = None,
    deps: object = None,
    where: Children = IN_PROCESS,
) -> str:
    """Run ``agent`` as a child of ``parent`` for call ``call_id``; its answer as text
    (``deps``: its dependencies, None: the parent's).

    The one way a child starts, embedded or on workers (``where``). The binding
    (call id → child run id) is saved with the parent *before* the child's
    first step. So if this call already has a child (the parent was resumed,
    maybe after a crash), that child is re-attached: resumed if it was still
    going or interrupted, and otherwise its saved outcome is returned. A call
    never gets a second child, and the child keeps its id, its spend and its
    idempotency keys. A child bound but never saved (its process died in
    between) is made again under its bound id (with no limits left if its
    parent has none to carve).
    """
    given = parent.deps if deps is None else deps
    check_deps(agent.name, agent.deps_type, given, "start")
    child_id = parent.state.children.get(call_id)
    child = None if child_id is None else await where.reattach(parent, child_id, agent)
    if child is None:
        async with where.admission(parent, call_id):
            state = new_state(agent, task, limits or agent.limits, parent, call_id, child_id)
            carved = await where.carve(parent, call_id, state, agent)
            if isinstance(carved, str):
                if child_id is None:
                    return f"{agent.name} was not started: {carved}."
                carved = Limits(max_turns=0, max_budget_usd=0.0)  # bound already: ends at once
            state.limits = carved
            child = LiveRun(state=state, agent=agent, runner=runner, parent=parent, deps=given)
            instruct(child)
            await where.open(parent, child, bind=child_id is None)
    child.deps = given
    parent.children.append(child)
    await where.run(child)
    while answered_by_parent(parent, child):  # its request for more, granted by the parent
        await where.run(child)
    return child_answer(child)


def carve_child(
    parent: LiveRun, call_id: str, child: RunState, agent: Agent, now: float
) -> Limits | str:
    """The limits of ``child``, a run of ``agent``, as its parent's agent carves
    them at ``now`` (see :mod:`orchestra._core.fair`; synchronous: a worker calls it
    in a thread, inside a ledger decision)."""
    return fair_carve(parent, call_id, child, agent.tool_specs(), now)


def child_answer(child: LiveRun) -> str:
    """The child's answer for its parent, or :class:`ChildWaiting` if it waits for a human."""
    waiting = child.state.interruption
    if waiting is not None and waiting.kind.waits_for_human:
        if waiting.run_id == child.state.run_id:  # deeper calls were named on the way up
            where = f" (in {child.state.agent} run {waiting.run_id})"
            waiting = attrs.evolve(waiting, reason=waiting.reason + where)
        raise ChildWaiting(waiting)
    return stop_sentence(RunResult(state=child.state))  # its state alone, not its subtree's


def trio_deadline(run: LiveRun) -> float:
    deadline = run.state.limits.deadline
    own = float("inf") if deadline is None else trio.current_time() + deadline - run.runner.now()
    parent = run.parent.deadline if run.parent is not None else float("inf")
    return min(own, parent)


async def execute(run: LiveRun, *, one_step: bool = False, announce: bool = True) -> None:
    """Drive ``run`` inside its own cancel scope and record exactly one exit.

    With ``one_step``, only one step (see :func:`~orchestra._core.loop.drive`): a
    run still ``running`` after it is saved as it is (with its elapsed time),
    to be continued by a later call, maybe in another process. ``announce``
    emits ``run_started`` first.

    Cancellation: if an enclosing scope is cancelled, the run records
    ``interrupted`` (or ``deadline_exceeded``) and saves before ``Cancelled``
    propagates; if its own scope is cancelled (its deadline, or a cancel aimed
    at it), it records the same and returns normally. Either way the exit is
    recorded while ``Cancelled`` is still on its way out of the run's scope:
    the root of a cancelled tree saves the tree before its scope lets go of
    the exceptions (and frames) of all its runs.
    """
    run.deadline = trio_deadline(run)
    charge_lost_stream(run)  # before any save: a save forgets the stream's note
    if announce:
        _announce(run)
    run.runner.keeper.register(run)
    run.clock_started = trio.current_time()
    paused = False
    try:
        with trio.CancelScope(deadline=run.deadline) as run.scope:
            if run.cancel_reason is not None:  # cancelled before it started
                run.scope.cancel()
            try:
                await drive(run, one_step=one_step)
                paused = True
            finally:
                if not paused and _stopped_by_cancel(run):
                    run.finish(stopped_exit(run))
    except Exception as exc:  # a bug or a broken dependency: the run fails, as data
        run.finish(_internal_error(exc))
    finally:
        run.runner.keeper.unregister(run)
        if run.state.status is Status.RUNNING:
            if paused:  # one step done: saved as it is, to be continued
                run.stop_clock()
                run.checkpoint()
            else:
                run.finish(stopped_exit(run))


def _stopped_by_cancel(run: LiveRun) -> bool:
    """Whether ``run``, still running, is being stopped by a cancel (its scope's or
    an enclosing one's: a cancel, or a deadline reached) and by nothing else.

    Called in a ``finally``: the exception on its way out is ``sys.exception()``.
    """
    if run.state.status is not Status.RUNNING:
        return False
    if trio.current_effective_deadline() != -math.inf:
        return False
    exc = sys.exception()
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def _announce(run: LiveRun) -> None:
    """``run_started`` (and a price warning), saved."""
    call = {} if run.state.parent_call_id is None else {"call_id": run.state.parent_call_id}
    run.emit(
        "run_started",
        agent=run.state.agent,
        model=run.state.model,
        resumed=run.state.turns > 0,
        limits=run.state.limits.to_dict(),
        **call,  # a child: the call of its parent that started it
    )
    _warn_about_price(run)
    run.checkpoint()


def _warn_about_price(run: LiveRun) -> None:
    budgeted = any(node.state.limits.budget_pico is not None for node in run.lineage())
    warning = run.runner.pricing.prices.warning(
        run.state.model, budgeted=budgeted, endpoint=run.runner.pricing.endpoint
    )
    if warning is not None:
        run.emit("price_warning", model=run.state.model, message=warning)


def _internal_error(exc: Exception) -> Exit:
    """The exit of a run an exception stopped: a configuration met only while
    running (an agent's output the provider cannot ask for) in its own words,
    anything else as an internal error with its traceback."""
    if isinstance(exc, ConfigError):
        return Exit(status=Status.FAILED, reason=str(exc))
    return Exit(
        status=Status.FAILED,
        reason=f"internal error: {exc!r}",
        error="".join(traceback.format_exception(exc)),
    )


def stopped_exit(run: LiveRun) -> Exit:
    """The exit of a run whose scope (or an enclosing one) was cancelled."""
    for node in run.lineage():
        if node.cancel_reason is not None:
            return _cancelled(node.cancel_reason)
    if trio.current_time() >= run.deadline:
        tree = "" if run.deadline == _own_deadline(run) else " (an ancestor's deadline)"
        return Exit(status=Status.DEADLINE_EXCEEDED, reason=f"deadline reached{tree}")
    return _cancelled("cancelled from outside the run")


def _own_deadline(run: LiveRun) -> float:
    parent = run.parent.deadline if run.parent is not None else float("inf")
    return run.deadline if run.deadline < parent else float("nan")


@functools.lru_cache(maxsize=64)
def _cancelled(reason: str) -> Exit:
    """The exit of a cancelled run (one value per reason: every run of a
    cancelled tree ends with the same)."""
    interruption = Interruption(kind=InterruptionKind.CANCELLED, reason=reason)
    return Exit(status=Status.INTERRUPTED, reason=reason, interruption=interruption)
