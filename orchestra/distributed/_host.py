"""A worker's runner: child runs inline or queued, budgets through the ledger.

Embedded, an agent tool's child run executes inside its parent's tool call,
in the same process. On a worker it is *bound* to its parent's call the same
way (binding saved with the parent before the child exists) and its limits
are carved from what the parent has left inside one ledger transaction (the
parent's row locked). Then, while the worker has room (``--inline-children``
children executing inline at once), it executes **inline**, as embedded:
inside its parent's step, under its parent's claim (every save of it is
fenced by that claim), with no workflow, queue, claim or park of its own
(:class:`Inline`). Its row names the run whose step executes it
(:meth:`PostgresStore.mark_inline`), so the sweep leaves it to that run and
a cancel finds it; if the worker dies, whoever takes the parent up runs the
parent's call again, finds the binding and goes on with the child inline
(its lost call charged, as any run taken up).

Without room, it is queued (:class:`OnWorkers`): any worker may take it.
The parent does not wait for it holding a worker slot: its call raises
:class:`~orchestra._core.run.ChildPending`, the call stays pending and the parent
*parks* (its workflow ends; see :meth:`PostgresStore.park`). When its last
running child ends, the worker that ended it queues the parent again; the
parent's step runs the call again, finds the binding, and gets the child's
saved answer, as embedded. So no burst of trees can fill every slot with
parents waiting for children that cannot start. (A plain, non-idempotent
write that starts a child cannot run twice, so it waits in its step, polling
the store, as a crash resumed it would.) A parent resumed after a crash finds
the binding and waits for the same child (queued again under the same
workflow id: a no-op if it is still queued or running).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import attrs
import trio

from .._agent import Agent
from .._core.dispatch import may_park
from .._core.execute import IN_PROCESS, carve_child, reopen_state, spawn_child
from .._core.run import ChildPending, LiveRun
from .._events import EventRecord
from .._exceptions import LeaseLost, RunNotFound, StoreUnreachable
from .._keeper import TreeKeeper
from .._runner import Runner
from .._state import Limits, RunState, Status, Usage
from .._stores.fence import Fence
from ._ledger import PostgresLedger
from ._threads import (
    StepAbandoned,
    abandon_step,
    here,
    in_thread,
    step_abandoned,
    step_fence,
    step_saved,
    step_superseded,
    supersede_step,
)

if TYPE_CHECKING:
    from ._pgstore import PostgresStore

__all__ = ["InlineRoom", "RunQueue", "WorkerRunner", "settle_lost"]

WAIT_POLL_S = 0.05
"""How often a parent waiting in its step for a child (a plain write's: see
above) reads its status."""


class RunQueue(Protocol):
    """Where runs wait for a worker."""

    async def enqueue(self, run_id: str) -> None:
        """Queue ``run_id``'s current attempt (a no-op if it is already queued or running)."""
        ...


@attrs.define(kw_only=True, eq=False)
class InlineRoom:
    """How many child runs a worker executes inline at once, at most (beyond
    that, new children are queued: any worker may take them)."""

    limit: int
    used: int = 0

    def take(self) -> bool:
        """Take a place if there is one; whether it did."""
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def hold(self) -> None:
        """Take a place even past the limit (a child that can execute nowhere else)."""
        self.used += 1

    def give(self) -> None:
        self.used -= 1


async def settle_lost(live: LiveRun) -> None:
    """Charge a call of ``live`` whose outcome was never recorded (its worker
    died mid-call), at its reservation, saying so; load its lineage's numbers
    from the ledger either way (see :meth:`PostgresLedger.settle_lost`). For a
    run taken up: none of its calls is in flight."""
    ledger = live.runner.ledger
    assert isinstance(ledger, PostgresLedger)
    lost = await ledger.settle_lost(live)
    if lost is not None:
        live.emit(
            "lost_call",
            cost_usd=lost.cost_usd,
            message="a model call whose outcome was never recorded (its worker died, "
            "or the database was away); charged at its reservation",
        )


@attrs.define(kw_only=True, eq=False)
class WorkerKeeper(TreeKeeper):
    """The keeper of a worker's runs: saves fenced by the current step's claim on
    its run (not a tree's lease), a step abandoned while the database is away,
    and no stream notes (a write on the step's thread per piece would hold up
    the worker's loop; a call in flight when a worker dies is charged by the
    ledger at its reservation, and the console shows a worker's reply once saved)."""

    keeps_streams: bool = False

    def fence(self, root_id: str) -> Fence | None:
        """The claim of the current step on its run: every save of the step (its
        run's, a child's it creates) is fenced by it, not by a tree's lease."""
        return step_fence()

    def save(self, state: RunState, events: Sequence[EventRecord] = ()) -> None:
        """Save, or abandon the current step if the database cannot be reached.

        Raises:
            StepAbandoned: the database is away (now, or earlier in this step).
            LeaseLost: the step's claim was taken over (now or earlier): the
                step is superseded (see :meth:`lose`).
        """
        if step_abandoned():
            raise StepAbandoned(f"run {state.run_id}: the database went away during this step")
        if step_superseded():
            raise LeaseLost(f"run {state.run_id}: this step's claim was taken over")
        try:
            super().save(state, events)
        except StoreUnreachable as exc:
            abandon_step()
            raise StepAbandoned(str(exc)) from exc
        step_saved()

    def lose(self, root_id: str, why: str) -> None:
        """A save found the step's claim taken over: the step alone stops (its
        scope is cancelled) and saves nothing more; other runs of the tree
        stepping here are not touched."""
        supersede_step()

    def lost_lease(self, root_id: str) -> bool:
        """True in a step the database failed or whose claim was taken over: its
        exit is not saved.

        Only that step's: another run of the tree stepping here at the same
        time saves as usual (see :func:`~._threads.stepping`).
        """
        return step_abandoned() or step_superseded()


@attrs.define(kw_only=True, eq=False)
class WorkerRunner(Runner):
    """A :class:`~orchestra.Runner` whose runs are steps of queued workflows
    (its keeper a :class:`WorkerKeeper`)."""

    queue: RunQueue
    room: InlineRoom = attrs.field(factory=lambda: InlineRoom(limit=0))
    """This worker's room for children executed inline (shared by its runners)."""
    keeper: WorkerKeeper = attrs.field(init=False)
    KEEPER: ClassVar[type[TreeKeeper]] = WorkerKeeper

    async def spawn_child(
        self,
        parent: LiveRun,
        call_id: str,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
        deps: Any = None,
    ) -> str:
        """Bind, carve and run a child of ``parent`` inline, or queue and await it;
        its answer (the one path of :func:`~orchestra._core.execute.spawn_child`).
        ``deps``: the child's dependencies where it runs inline (None: its
        parent's); a queued child gets those its worker makes for the tree.

        A new child runs inline if this worker has room; a bound one (its parent
        taken up again) where it ran: inline if its row says so, else queued.
        """
        bound = parent.state.children.get(call_id)
        inline = await self._inline(bound)
        if not inline:
            return await spawn_child(
                self, parent, call_id, agent, task, limits=limits, deps=deps, where=OnWorkers(self)
            )
        try:
            return await spawn_child(
                self, parent, call_id, agent, task, limits=limits, deps=deps, where=Inline(self)
            )
        finally:
            self.room.give()

    async def _inline(self, bound: str | None) -> bool:
        """Whether the child (``bound``: its id if it exists) runs inline here;
        if so it holds a place in :attr:`room` (a bound child marked inline
        takes one even past the limit: it cannot move)."""
        if bound is not None:
            try:
                step_of = await in_thread(self._store.step_of, bound)
            except RunNotFound:
                step_of = None  # bound, never saved: made again, as a new one
            else:
                if step_of is None:
                    return False
                self.room.hold()
                return True
        return self.room.take()

    async def _reopened(self, state: RunState) -> RunState:
        """A child interrupted earlier (e.g. for an approval), running again, re-queued."""
        reopen_state(state, None, "", self.now)
        self.keeper.save(state)
        await in_thread(self._store.requeue, state.run_id)
        return state

    async def _outcome(self, run_id: str) -> RunState:
        """Wait until the run leaves ``running``; its state then.

        Cancellation: a checkpoint every :data:`WAIT_POLL_S`; the child itself
        is stopped by the tree's cancel request, on whichever worker runs it.
        """
        while True:
            status = await in_thread(self._store.status, run_id)
            if status is not Status.RUNNING:
                return await in_thread(self.store.load, run_id)
            await trio.sleep(WAIT_POLL_S)

    @property
    def _ledger(self) -> PostgresLedger:
        """The ledger, as the PostgreSQL ledger it is on a worker."""
        assert isinstance(self.ledger, PostgresLedger)
        return self.ledger

    @property
    def _store(self) -> PostgresStore:
        """The store, as the PostgreSQL store it is on a worker."""
        return cast("PostgresStore", self.store)


@attrs.define(eq=False)
class Inline:
    """A child executed inside its parent's step, as embedded (see the module):
    carved and opened as a queued one, marked as its parent's, then driven here."""

    runner: WorkerRunner
    _queued: OnWorkers = attrs.field(init=False)
    _reattached: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._queued = OnWorkers(self.runner)

    def admission(
        self, parent: LiveRun, call_id: str
    ) -> contextlib.AbstractAsyncContextManager[None]:
        return IN_PROCESS.admission(parent, call_id)  # a slot is held as it runs

    async def carve(
        self, parent: LiveRun, call_id: str, child: RunState, agent: Agent
    ) -> Limits | str:
        return await self._queued.carve(parent, call_id, child, agent)

    async def reattach(self, parent: LiveRun, child_id: str, agent: Agent) -> LiveRun | None:
        child = await self._queued.reattach(parent, child_id, agent)
        self._reattached = child is not None
        return child

    async def open(self, parent: LiveRun, child: LiveRun, *, bind: bool) -> None:
        await self._queued.open(parent, child, bind=bind)
        fence = step_fence()
        assert fence is not None
        here(self.runner._store.mark_inline, child.state.run_id, fence)

    async def run(self, child: LiveRun) -> None:
        """Drive ``child`` here if it is going on or interrupted (taken up again:
        its lost call charged first), holding one of its parent's slots."""
        if self._reattached and child.state.status in (Status.RUNNING, Status.INTERRUPTED):
            await settle_lost(child)
        await IN_PROCESS.run(child)


_STARTING: weakref.WeakKeyDictionary[LiveRun, trio.Lock] = weakref.WeakKeyDictionary()
"""One lock per parent run (in this process): its children over a concurrency cap
are admitted, carved and bound one at a time."""


@attrs.frozen
class OnWorkers:
    """Children queued to workers: carved in the ledger, awaited in the store."""

    runner: WorkerRunner

    @contextlib.asynccontextmanager
    async def admission(self, parent: LiveRun, call_id: str) -> AsyncIterator[None]:
        """Admit a new child of ``parent`` under its ``max_concurrent_children``:
        with that many running (in the store), a call that may park raises
        :class:`ChildPending` (the parent parks until they have ended, then
        starts this one), any other waits. Children are admitted one at a time
        (a lock per parent, held until the child is bound and saved)."""
        cap = parent.state.limits.max_concurrent_children
        if cap is None:
            yield
            return
        lock = _STARTING.setdefault(parent, trio.Lock())
        async with lock:
            while True:
                running = await in_thread(self.runner._store.running_children, parent.state.run_id)
                if len(running) < cap:
                    break
                if may_park(parent, call_id):
                    raise ChildPending(running[0])
                await trio.sleep(WAIT_POLL_S)
            yield

    async def carve(
        self, parent: LiveRun, call_id: str, child: RunState, agent: Agent
    ) -> Limits | str:
        decide = partial(carve_child, parent, call_id, child, agent, self.runner.now())
        return await self.runner._ledger.guarded(parent, decide)

    async def reattach(self, parent: LiveRun, child_id: str, agent: Agent) -> LiveRun | None:
        try:
            state = await in_thread(self.runner.store.load, child_id)
        except RunNotFound:
            return None  # the process died between binding and the child's first save
        return LiveRun(state=state, agent=agent, runner=self.runner, parent=parent)

    async def open(self, parent: LiveRun, child: LiveRun, *, bind: bool) -> None:
        runner, state = self.runner, child.state
        here(runner._ledger.open_node, state, len(parent.lineage()), step_fence())
        if bind:
            parent.state.children[state.parent_call_id or ""] = state.run_id
            await runner._ledger.guarded(parent, partial(parent.charge, Usage(child_runs=1)))
            parent.checkpoint()  # the binding is durable before the child exists
        runner.keeper.save(state)

    async def run(self, child: LiveRun) -> None:
        """Queue ``child`` if it is going on (or resumable), then park its
        parent's call (:class:`ChildPending`) or, for a call that cannot
        park, wait for its end.

        Raises:
            ChildPending: the child has not ended; the call parks.
        """
        state, parent = child.state, child.parent
        assert parent is not None
        if state.run_id in parent.state.awaiting and state.status is not Status.RUNNING:
            parent.state.awaiting.remove(state.run_id)  # its end answers the call as it is
        elif state.status is Status.INTERRUPTED and state.status.resumable:
            state = await self.runner._reopened(state)
        if state.status is Status.RUNNING:
            await self.runner.queue.enqueue(state.run_id)
            if may_park(parent, state.parent_call_id or ""):
                raise ChildPending(state.run_id)
            child.state = await self.runner._outcome(state.run_id)
        await self.runner._ledger.refresh(parent)
