"""A worker's runner: child runs go to the queue, budgets through the ledger.

Embedded, an agent tool's child run executes inside its parent's tool call,
in the same process. On a worker it is *bound* to its parent's call the same
way (binding saved with the parent before the child exists), its limits are
carved from what the parent has left inside one ledger transaction (the
parent's row locked), and then it is queued: any worker may take it. The
parent's call waits for the child's outcome in the store and gets its answer,
as embedded. A parent resumed after a crash finds the binding and waits for
the same child (queued again under the same workflow id: a no-op if it is
still queued or running).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs
import trio

from .._agent import Agent
from .._budget import carve
from .._exceptions import LeaseLost, RunNotFound, StoreUnreachable
from .._execute import child_answer, new_state, reopen_state
from .._run import LiveRun
from .._runner import Runner
from .._state import Limits, RunState, Status, Usage
from .._stores.fence import Fence
from ._ledger import PostgresLedger
from ._threads import (
    StepAbandoned,
    abandon_step,
    in_thread,
    step_abandoned,
    step_fence,
    step_superseded,
    supersede_step,
)

if TYPE_CHECKING:
    from ._pgstore import PostgresStore

__all__ = ["RunQueue", "WorkerRunner"]

WAIT_POLL_S = 0.05
"""How often a parent waiting for a child on another worker reads its status."""


class RunQueue(Protocol):
    """Where runs wait for a worker."""

    async def enqueue(self, run_id: str) -> None:
        """Queue ``run_id``'s current attempt (a no-op if it is already queued or running)."""
        ...


@attrs.define(kw_only=True, eq=False)
class WorkerRunner(Runner):
    """A :class:`~orchestra.Runner` whose runs are steps of queued workflows."""

    queue: RunQueue

    def fence(self, root_id: str) -> Fence | None:
        """The claim of the current step on its run: every save of the step (its
        run's, a child's it creates) is fenced by it, not by a tree's lease."""
        return step_fence()

    def save(self, state: RunState, events: Sequence[dict[str, Any]] = ()) -> None:
        """Save, or abandon the current step if the database cannot be reached.

        Raises:
            StepAbandoned: the database is away (now, or earlier in this step).
            LeaseLost: the step's claim was taken over (now or earlier): the
                step is superseded (see :meth:`_lose`).
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

    def _lose(self, root_id: str, why: str) -> None:
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

    async def spawn_child(
        self,
        parent: LiveRun,
        call_id: str,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
    ) -> str:
        """Bind, carve, queue and await a child run of ``parent``; its answer."""
        state = await self._bound_child(parent, call_id, agent, task, limits)
        if isinstance(state, str):
            return state
        if state.status is Status.INTERRUPTED and state.status.resumable:
            state = await self._reopened(state)
        if state.status is Status.RUNNING:
            await self.queue.enqueue(state.run_id)
            state = await self._outcome(state.run_id)
        await self._ledger.refresh(parent)
        return child_answer(LiveRun(state=state, agent=agent, runner=self, parent=parent))

    async def _bound_child(
        self, parent: LiveRun, call_id: str, agent: Agent, task: str, limits: Limits | None
    ) -> RunState | str:
        """The child bound to ``call_id`` (made and bound now if there is none),
        or why it cannot start."""
        child_id = parent.state.children.get(call_id)
        if child_id is not None:
            try:
                return await in_thread(self.store.load, child_id)
            except RunNotFound:
                pass  # the process died between binding and the child's first save
        ask = limits or agent.limits
        carved = await self._ledger.guarded(parent, partial(carve, parent, ask, self.now()))
        if isinstance(carved, str):
            return f"{agent.name} was not started: {carved}."
        state = new_state(agent, task, carved, parent, call_id, child_id)
        depth = len(parent.lineage())
        await in_thread(self._ledger.open_node, state, depth, step_fence())
        if child_id is None:
            parent.state.children[call_id] = state.run_id
            await self._ledger.guarded(parent, partial(parent.charge, Usage(child_runs=1)))
            parent.checkpoint()  # the binding is durable before the child exists
        self.save(state)
        return state

    async def _reopened(self, state: RunState) -> RunState:
        """A child interrupted earlier (e.g. for an approval), running again, re-queued."""
        reopen_state(state, None, "", self.now)
        self.save(state)
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
