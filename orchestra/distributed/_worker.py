"""``orchestra worker``: a process that executes queued runs, a step at a time.

The main thread runs trio; DBOS runs in threads of its own and calls into
the trio loop for each step (see :mod:`orchestra.distributed._dbos`). Besides
the steps, the loop runs three small tasks:

- the **cancel watcher**: every ``poll_interval`` (50 ms) one query for cancel
  requests; a run of a tree with one is cancelled through its trio cancel
  scope at once (mid model call, mid tool), not at its next step boundary;
- the **heartbeat**: this worker's row in ``workers``, renewed every
  ``heartbeat_s`` (1 s), in a thread of its own;
- the **reaper**: a worker whose heartbeat is older than ``dead_after_s``
  (10 s; ``--dead-after``) is dead (killed, or its machine lost); the one live
  worker whose delete of its row wins (row locks decide) has DBOS queue its
  pending workflows again, and any live
  worker takes them up where their store state says they were.

A run taken up (claimed) here executes its steps one after another, each
saved before the next, until it stops or parks (one DBOS step covers them:
see :meth:`Worker._steps_of`). Runs are rebuilt from the store at each
claim: the state, its ancestors as read-only snapshots (their limits bound
the run; their spend and reservations come from the ledger, locked, at each
budget decision), and the agent, from the root run's recipe (``orchestra
demo``/``run``) or from an import reference
(``orchestra.distributed.submit(agents="pkg.mod:attr")``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import trio

from .._agent import Agent
from .._core.execute import execute, trio_deadline
from .._core.run import LiveRun
from .._deps import DEPS_KEY, deps_of_reference
from .._events import EventSink, fanout
from .._exceptions import ConfigError, LeaseLost, StateError, StoreError, StoreUnreachable
from .._model.margin import Margin
from .._model.provider import HTTPProvider
from .._model.retry import RetryPolicy
from .._model.tokens import encoding
from .._prices import PriceTable
from .._recipes.calls import ModelCalls, ProviderOptions
from .._recipes.recipe import Recipe
from .._reference import named
from .._state import RunState, Status
from .._stores.fence import Fence
from . import _dbos
from ._dispatch import IDLE_LOOK_S
from ._host import InlineRoom, WorkerRunner, settle_lost
from ._ledger import PostgresLedger
from ._notify import EventPublisher, create_schema
from ._pgstore import PostgresStore
from ._stall import StallWatch
from ._threads import (
    Step,
    StepAbandoned,
    hold,
    in_thread,
    step_fence,
    step_superseded,
    stepping,
    supersede_step,
    until_reachable,
)

__all__ = ["AGENTS_KEY", "DEAD_AFTER_S", "WAIT_FOR_DB_S", "Worker", "agent_of_reference"]

AGENTS_KEY = "orchestra.agents"
"""Run metadata: the ``module:attribute`` of the root agent (an Agent or a
function returning one) for runs submitted from Python."""

DEAD_AFTER_S = 10.0
"""A worker whose heartbeat is older than this is dead (its runs continue elsewhere)."""
SUPERSEDED = "superseded"
"""What a step returns when its run's claim was taken over (its workflow ends here)."""
PARKED = "parked"
"""What a step returns when its run waits for children executing elsewhere: its
workflow ends here, holding no slot, and the run is queued again (under its
next attempt) by the worker that sees its last running child end."""

WAIT_FOR_DB_S = 60.0
"""How long a starting worker waits for its database by default."""
DB_POLL_S = 1.0
"""How often a starting worker tries its database again while it is away."""

EXIT_DECLARED_DEAD = 75
"""A worker's exit status when it finds itself declared dead by its peers."""

_ROOTS_KEPT = 256
"""Trees whose agent and runner a worker keeps (then it rebuilds them)."""

_WORKERS_TABLE = """CREATE TABLE IF NOT EXISTS workers (
    executor TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    beat_at DOUBLE PRECISION NOT NULL
)"""


def _exit_declared_dead(executor_id: str) -> None:
    sys.stderr.write(
        f"worker {executor_id}: declared dead by the other workers (its heartbeat was late); "
        "its runs continue on them; exiting so that none runs twice\n"
    )
    sys.stderr.flush()
    os._exit(EXIT_DECLARED_DEAD)


def agent_of_reference(reference: str) -> Agent:
    """The agent ``module:attribute`` names (an Agent, or a function returning one).

    Raises:
        ConfigError: it cannot be imported or is not an agent.
    """
    found = named(reference, "agents")
    agent = found() if callable(found) and not isinstance(found, Agent) else found
    if not isinstance(agent, Agent):
        raise ConfigError(f"{reference!r} is not an Agent (nor a function returning one)")
    return agent


@attrs.define(kw_only=True, eq=False)
class Worker:
    """One worker process's state. ``serve()`` runs it until cancelled."""

    database: str
    executor_id: str = attrs.field(factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    concurrency: int = 4
    inline_children: int = 64
    """Child runs this worker executes inline (inside their parent's step, as
    embedded) at once, at most; beyond that they are queued (``--inline-children``;
    0: every child queued, for any worker to take)."""
    base_url: str | None = None
    """Where runs submitted from Python ask their model (None: the embedded
    scripted provider, as ``orchestra demo``)."""
    model_api_key: str = ""
    poll_interval: float = 0.05
    heartbeat_s: float = 1.0
    dead_after_s: float = DEAD_AFTER_S
    wait_for_db_s: float = WAIT_FOR_DB_S
    """How long a worker starting while its database is away waits for it
    (``--wait-for-db``) before it gives up (:class:`StoreUnreachable`)."""
    look_every_s: float = IDLE_LOOK_S
    """How often this worker looks for queued runs that no notification
    announced (``--look-every``; announced ones are taken at once: see
    :mod:`._dispatch`)."""
    sink: EventSink | None = None
    on_declared_dead: Callable[[str], None] = attrs.field(factory=lambda: _exit_declared_dead)
    """Called when peers declared this worker dead (default: exit the process, 75)."""
    _store: PostgresStore = attrs.field(init=False)
    _ledger: PostgresLedger | None = attrs.field(default=None, init=False)
    _queue: _dbos.DBOSQueue | None = attrs.field(default=None, init=False)
    _scripted_url: str | None = attrs.field(default=None, init=False)
    _providers: dict[ProviderOptions, HTTPProvider] = attrs.field(factory=dict, init=False)
    _runners: dict[str, WorkerRunner] = attrs.field(factory=dict, init=False)
    _roots: dict[str, tuple[WorkerRunner, Agent]] = attrs.field(factory=dict, init=False)
    _tree_deps: dict[str, object] = attrs.field(factory=dict, init=False)
    _running: dict[str, LiveRun] = attrs.field(factory=dict, init=False)
    _taken: set[str] = attrs.field(factory=set, init=False)
    _cancels: dict[str, str] = attrs.field(factory=dict, init=False)
    _launched: bool = attrs.field(default=False, init=False)
    _room: InlineRoom = attrs.field(init=False)
    _steps: set[Step] = attrs.field(factory=set, init=False)
    """The steps executing here now."""
    _publisher: EventPublisher | None = attrs.field(default=None, init=False)
    """Sends the events of trees that clients follow to them (see :mod:`._notify`)."""

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Take runs from the queue until cancelled (then DBOS is stopped).

        A database that cannot be reached at the start is waited for, up to
        :attr:`wait_for_db_s` (said once on stderr); then
        :class:`StoreUnreachable` is raised.

        Cancellation: the runs executing here are interrupted like any cancel
        (their workflows stay pending in DBOS, so another worker continues them
        once this one's heartbeat is old).
        """
        from .._scripted.server import scripted_server

        publisher = self._publisher = EventPublisher(self.database, self.executor_id)
        await until_reachable(
            self._open,
            patience_s=self.wait_for_db_s,
            poll_s=DB_POLL_S,
            on_away=self._say_away,
        )
        try:
            async with scripted_server(faults=False) as url, trio.open_nursery() as nursery:
                nursery.start_soon(publisher.run)
                # Beating from the moment the row exists: DBOS's migration and
                # launch take seconds on a loaded machine, and a silent worker
                # looks dead. It judges others only once DBOS runs here.
                nursery.start_soon(self._beat)
                # DBOS is synchronous (SQLAlchemy): its migration blocks a thread, not the loop
                await trio.to_thread.run_sync(_dbos.migrate, self.database, self._store)
                # Before "ready": the first step of each run here counts its prompt,
                # and building the tokenizer takes seconds on a loaded machine.
                await trio.to_thread.run_sync(encoding)
                self._queue = _dbos.DBOSQueue(self.database, self._store)
                self._scripted_url = url
                _dbos.serve(self.advance)
                await trio.to_thread.run_sync(
                    partial(
                        _dbos.launch,
                        self.database,
                        self.executor_id,
                        self.concurrency,
                        idle_look_s=self.look_every_s,
                    )
                )
                self._launched = True
                nursery.start_soon(self._watch)
                watch = StallWatch(max(self.heartbeat_s, 0.5), self._on_stall)
                trio.lowlevel.add_instrument(watch)
                try:
                    task_status.started()
                    await trio.sleep_forever()
                finally:
                    trio.lowlevel.remove_instrument(watch)
        finally:
            # shielded: a worker stopped by a signal still stops DBOS (its executor
            # threads) and closes its providers before the process exits
            with trio.CancelScope(shield=True):
                await self._close()

    def __attrs_post_init__(self) -> None:
        self._room = InlineRoom(limit=self.inline_children)

    def _open(self) -> None:
        """Open the store and ledger; make this worker's tables and row (blocking).

        Raises:
            StoreUnreachable: the database cannot be reached (nothing is left open).
        """
        store = PostgresStore(self.database)
        try:
            self._store = store
            self._ledger = PostgresLedger(store=store, executor=self.executor_id)
            self._prepare()
        except BaseException:
            store.close()
            raise

    def _say_away(self, exc: StoreUnreachable) -> None:
        sys.stderr.write(
            f"worker {self.executor_id}: {exc}; waiting up to {self.wait_for_db_s:g} s "
            "for it (--wait-for-db)\n"
        )
        sys.stderr.flush()

    def _prepare(self) -> None:
        assert self._ledger is not None
        self._ledger.create()
        with self._store.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('orchestra.workers'))")
            conn.execute(_WORKERS_TABLE)
            create_schema(conn)
        self._heartbeat(first=True, judge=False)

    async def _close(self) -> None:
        # DBOS joins its executor threads: blocking, so off the trio thread
        await trio.to_thread.run_sync(_dbos.destroy)
        for provider in self._providers.values():
            await provider.aclose()
        if self._queue is not None:
            self._queue.close()
        self._store.close()

    # -- one step ---------------------------------------------------------------

    async def advance(self, run_id: str, attempt: int | None = None) -> str:
        """Execute the next step of ``run_id`` here; its status after it.
        ``attempt``: the one the workflow was queued for (a workflow of an
        earlier one, replaced by a sweep or a wake, ends :data:`SUPERSEDED`
        without touching the run).

        Steps of several runs of one tree may execute here at once: a database
        outage abandons the step that met it, never another (see
        :func:`~._threads.stepping`).

        Returns :data:`SUPERSEDED` (which ends the workflow here) if the run's
        claim was taken over during the step: a peer declared this worker dead
        and continues the run, or a cancel stopped it in the database; and
        :data:`PARKED` (which ends it too) if the run now waits for children
        executing elsewhere.

        The step executes the run's steps until it stops or parks (see
        :meth:`_steps_of`). If the database goes away after one of its saves got
        through, it returns ``running``: what was saved stands, and the rest is
        the workflow's next DBOS step, with its own tries.

        Raises:
            StepAbandoned: the database went away before any save of this step
                got through (nothing of it was saved; DBOS tries it again).
        """
        status = SUPERSEDED
        with stepping() as step:
            self._steps.add(step)
            try:
                with step.scope:
                    status = await self._step(run_id, attempt)
            except StepAbandoned:
                if not step.saved:
                    raise
            finally:
                self._steps.discard(step)
        if step.superseded:
            return SUPERSEDED
        if step.abandoned and step.saved:
            # What the run's steps did here up to the outage is saved: the rest is a
            # DBOS step of its own (the workflow's next), with its own tries.
            return Status.RUNNING.value
        if step.abandoned:
            raise StepAbandoned(
                f"run {run_id}: this worker froze and cannot tell whether it "
                "was declared dead meanwhile; the step is tried again"
            )
        return status

    async def _step(self, run_id: str, attempt: int | None) -> str:
        taken = await in_thread(self._take, run_id, attempt)
        if taken is None:  # stopped (maybe in the database), parked, or queued again
            saved: RunState = await in_thread(self._store.load, run_id)
            if saved.status is Status.RUNNING:
                if attempt is not None and await in_thread(self._store.attempt, run_id) != attempt:
                    return SUPERSEDED  # the run's current workflow executes it
                return PARKED
            # this step's earlier try may have stopped the run and then met an
            # outage (or its worker died) before the tree's costs were set
            await self._end_of(saved)
            return saved.status.value
        (state, fence), cancels = taken
        hold(fence)
        try:
            live = await self._live(state)
            # No call of the run is in flight: any hold is stale. The lineage's
            # numbers are loaded from the ledger in the same transaction.
            await settle_lost(live)
        except (ConfigError, StateError) as exc:  # cannot be rebuilt here: fails, as data
            return await self._fail(state, f"the worker cannot execute this run: {exc}")
        assert isinstance(live.runner, WorkerRunner)
        first = run_id not in self._taken
        self._taken.add(run_id)
        self._cancels.update(cancels)
        reason = self._cancel_of(live)
        if reason is not None:
            live.request_cancel(reason)
        self._running[run_id] = live
        try:
            await self._steps_of(live, announce=first)
        finally:
            del self._running[run_id]
        if step_superseded():
            return SUPERSEDED
        if live.state.status is Status.RUNNING:
            return PARKED if live.parked and await self._park(run_id) else Status.RUNNING.value
        self._taken.discard(run_id)
        await self._end_of(live.state)
        return live.state.status.value

    async def _end_of(self, stopped: RunState) -> None:
        """What follows a run's stop: its tree's costs (see :meth:`_reconcile_after`),
        then its parent's wake."""
        await self._reconcile_after(stopped)
        await self._wake_parent(stopped)

    def _take(
        self, run_id: str, attempt: int | None
    ) -> tuple[tuple[RunState, Fence], dict[str, str]] | None:
        """Claim ``run_id`` (its state and fence) and read its tree's cancel requests;
        None if it is not running at ``attempt`` (blocking: one thread hop for both)."""
        claimed = self._store.claim(run_id, self.executor_id, attempt)
        if claimed is None:
            return None
        return claimed, self._store.cancels_of([claimed[0].root_id])

    async def _steps_of(self, live: LiveRun, *, announce: bool) -> None:
        """Execute the run's steps here, one after another, under the one claim taken
        for them, until it stops or parks.

        Why one claim and one DBOS step may cover several run steps: every step
        saves what it did to the run store before the next begins (the reply
        before its tools run, each tool's result), and the store is what any
        worker continues from, so a worker that dies here costs the step in
        flight only, as with a DBOS step per run step. In between, nothing is
        read back: the live run is the saved state (every save is fenced by the
        claim: a takeover stops the run at its next save, which is refused),
        the ledger's numbers are loaded again, locked, by each budget decision,
        and a cancel reaches the run through the watcher (it is in
        ``_running`` throughout).
        """
        await execute(live, announce=announce)

    async def _park(self, run_id: str) -> bool:
        """Park the run (its calls wait for children executing elsewhere) unless
        they all ended meanwhile; whether it is parked.

        Its claim is given up with it: whoever takes it up after its wake
        claims it anew (see :meth:`PostgresStore.park`)."""
        try:
            return await in_thread(self._store.park, run_id, step_fence())
        except LeaseLost:
            supersede_step()
            return False

    async def _wake_parent(self, state: RunState) -> None:
        """``state``'s run has ended: queue its parent again if it is parked and
        this was its last running child."""
        if state.parent_id is None:
            return
        attempt = await in_thread(self._store.wake, state.parent_id)
        if attempt is not None:
            assert self._queue is not None
            await self._queue.enqueue(state.parent_id)

    async def _reconcile_after(self, stopped: RunState) -> None:
        """Set the saved tree costs of ``stopped``'s tree to the ledger's if its
        root has stopped: at the root's stop, and at every later stop of one
        of its runs (a child on another worker whose last charge landed after
        the root's reconcile: a cancelled tree, a root out of time).

        Either way round one of the two sees the other: a child saves its stop
        after its last charge and then reads the root's status; the root saves
        its stop and then reconciles. Idempotent: a step tried again (the
        database failed it, or its worker died) makes it again."""
        if stopped.status is Status.RUNNING:
            return
        if stopped.parent_id is not None:
            root_status: Status = await in_thread(self._store.status, stopped.root_id)
            if root_status is Status.RUNNING:
                return
        assert self._ledger is not None
        await in_thread(self._ledger.reconcile, stopped.root_id)

    async def _fail(self, state: RunState, reason: str) -> str:
        state.status, state.reason = Status.FAILED, reason
        state.updated_at = time.time()
        fence = step_fence()
        await in_thread(lambda: self._store.save(state, fence=fence))
        await self._end_of(state)
        return state.status.value

    async def _live(self, state: RunState) -> LiveRun:
        """The run, live, under snapshots of its ancestors (their numbers are loaded
        from the ledger next, by :func:`~._host.settle_lost`)."""
        lineage: list[RunState] = []
        parent_id = state.parent_id
        while parent_id is not None:
            parent: RunState = await in_thread(self._store.load, parent_id)
            lineage.append(parent)
            parent_id = parent.parent_id
        root = lineage[-1] if lineage else state
        runner, root_agent = await self._root(root)
        node: LiveRun | None = None
        for ancestor in [*reversed(lineage), state]:
            node = self._node(ancestor, root_agent, runner, node)
            node.deps = self._deps_of(root)  # every run of the tree: the tree's
        assert node is not None
        return node

    def _node(
        self, state: RunState, root_agent: Agent, runner: WorkerRunner, parent: LiveRun | None
    ) -> LiveRun:
        agent = root_agent.find(state.agent)
        if agent is None:
            raise StateError(
                f"run {state.run_id}: no agent {state.agent!r} under {root_agent.name!r}"
            )
        node = LiveRun(state=state, agent=agent, runner=runner, parent=parent)
        node.deadline = trio_deadline(node)
        return node

    def _cancel_of(self, live: LiveRun) -> str | None:
        for node in live.lineage():
            reason = self._cancels.get(node.state.run_id)
            if reason is not None:
                return reason
        return None

    # -- agents and providers ---------------------------------------------------

    async def _root(self, root: RunState) -> tuple[WorkerRunner, Agent]:
        """The runner and root agent of a tree (made once per tree in this process)."""
        known = self._roots.get(root.run_id)
        if known is None:
            if len(self._roots) >= _ROOTS_KEPT:
                self._roots.clear()
            known = self._rebuild(root)
            self._roots[root.run_id] = known
        return known

    def _deps_of(self, root: RunState) -> object:
        """The dependencies of a tree's runs: made here from the reference its root
        was submitted with (once per tree in this process; None without one).

        Raises:
            ConfigError: the reference cannot be imported, or making them failed.
        """
        reference = root.metadata.get(DEPS_KEY)
        if reference is None:
            return None
        if root.run_id not in self._tree_deps:
            if len(self._tree_deps) >= _ROOTS_KEPT:
                self._tree_deps.clear()
            self._tree_deps[root.run_id] = deps_of_reference(reference)
        return self._tree_deps[root.run_id]

    def _rebuild(self, root: RunState) -> tuple[WorkerRunner, Agent]:
        reference = root.metadata.get(AGENTS_KEY)
        if reference is not None:
            return self._runner(self._submitted_calls()), agent_of_reference(reference)
        recipe = Recipe.of(root)
        if recipe.mcp:
            raise ConfigError("runs with MCP tools are not executed by workers yet")
        return self._runner(recipe.model_calls()), recipe.agent(root.limits)

    def _submitted_calls(self) -> ModelCalls:
        """How runs submitted from Python (no recipe) call their model: this
        worker's ``--base-url`` (else the embedded scripted server)."""
        return ModelCalls(
            provider=ProviderOptions(base_url=self.base_url),
            prices=PriceTable(warn_unknown=self.base_url is not None),
            retry=RetryPolicy(),
            margin=Margin(),
        )

    def _runner(self, calls: ModelCalls) -> WorkerRunner:
        """The runner of trees whose model calls are made as ``calls`` says (one each)."""
        runner = self._runners.get(calls.key)
        if runner is None:
            assert self._queue is not None and self._ledger is not None
            runner = WorkerRunner(
                provider=self._provider(calls.provider),
                prices=calls.prices,
                retry=calls.retry,
                prompt_margin=calls.margin,
                store=self._store,
                sink=fanout(self.sink, self._publisher),
                queue=self._queue,
                ledger=self._ledger,
                owner=self.executor_id,
                room=self._room,
            )
            self._runners[calls.key] = runner
        return runner

    def _provider(self, options: ProviderOptions) -> HTTPProvider:
        """The provider built from ``options`` (one per distinct options: equal
        ones share a connection pool), as the embedded path builds it."""
        provider = self._providers.get(options)
        if provider is None:
            provider = options.build(scripted_url=self._scripted_url, api_key=self.model_api_key)
            self._providers[options] = provider
        return provider

    # -- watcher, heartbeat, reaper ---------------------------------------------

    async def _watch(self) -> None:
        """Apply cancel requests to the runs executing here, every ``poll_interval``
        (one query, for the trees executing here; none while nothing runs)."""
        while True:
            roots = sorted({live.state.root_id for live in self._running.values()})
            if roots:
                try:
                    self._cancels = await in_thread(self._store.cancels_of, roots)
                except StepAbandoned:  # the database is away: look again next time
                    await trio.sleep(self.poll_interval)
                    continue
                for live in list(self._running.values()):
                    reason = self._cancel_of(live)
                    if reason is not None and live.cancel_reason is None:
                        live.request_cancel(reason)
            await trio.sleep(self.poll_interval)

    async def _beat(self) -> None:
        """Renew this worker's heartbeat; have dead workers' workflows recovered.

        If peers declared *this* worker dead (it stalled past ``dead_after_s``),
        its runs are being continued elsewhere: it stops at once
        (:attr:`on_declared_dead`) rather than execute them twice.
        """
        healthy_since = sweep_at = time.monotonic()
        while True:
            await trio.sleep(self.heartbeat_s)
            # Not through the store's shared thread limit: runs waiting on locks
            # must never delay the heartbeat into a false death.
            try:
                judge = self._launched and time.monotonic() - healthy_since >= self.dead_after_s
                # in a thread of its own: a beat is never late because the loop is busy
                dead = await trio.to_thread.run_sync(self._heartbeat, False, judge)
            except StoreUnreachable:
                # Away from the database, this worker cannot tell who is dead:
                # everyone's heartbeat looks old just after an outage.
                healthy_since = time.monotonic()
                continue
            if dead is None:
                self.on_declared_dead(self.executor_id)
                return
            if dead:
                self._tell(
                    f"declared {', '.join(dead)} dead (no heartbeat for {self.dead_after_s:g} s); "
                    "their workflows queued again"
                )
                # DBOS re-queues the dead executors' workflows in its own (blocking) calls
                await trio.to_thread.run_sync(_dbos.recover, dead, self._store)
            if judge and time.monotonic() >= sweep_at:
                sweep_at = time.monotonic() + self.dead_after_s / 2
                with contextlib.suppress(StoreUnreachable):
                    await trio.to_thread.run_sync(self._sweep)

    def _on_stall(self, seconds: float) -> None:
        """This process was frozen for ``seconds``: before any task goes on, see
        whether peers declared it dead meanwhile (then stop, as the heartbeat
        would a beat later: a tool past its sleep must not reach its effect).
        If the database cannot say, every step executing here is abandoned
        (taken up again from its saved state once the database answers)."""
        sys.stderr.write(
            f"worker {self.executor_id}: frozen for {seconds:.1f} s (until {time.time():.3f}); "
            "asking whether it was declared dead meanwhile\n"
        )
        for _ in range(3):  # a connection broken meanwhile is remade on the next try
            try:
                alive = self._heartbeat(judge=False) is not None
            except StoreError:
                continue
            if not alive:
                self.on_declared_dead(self.executor_id)
            return
        for step in list(self._steps):  # cannot tell: no step goes on unchecked
            step.abandon_now()

    def _sweep(self) -> list[str]:
        """Queue again the runs left ``running`` with no workflow to continue them
        (theirs ended, or never began) and not saved for ``dead_after_s``; their ids.

        Each is queued under its next attempt, by one worker only (the attempt
        is compared and increased in one statement).
        """
        assert self._queue is not None
        moved = self._wake_lost()
        runs = self._store.stale_running(time.time() - self.dead_after_s)
        if not runs:
            return moved
        unfinished = self._queue.unfinished([_dbos.workflow_id(s.run_id, s.attempt) for s in runs])
        self._recover_orphans({holder for holder in unfinished.values() if holder is not None})
        for stale in runs:
            if _dbos.workflow_id(stale.run_id, stale.attempt) in unfinished:
                continue
            if self._store.requeue_if(stale) is not None:
                moved.append(self._queued_again(stale.run_id, "was left running with no workflow"))
        return moved

    def _recover_orphans(self, holders: set[str]) -> None:
        """Have the workflows of ``holders`` that have no row in ``workers`` queued
        again: a worker declared dead whose DBOS took a workflow from the queue
        after its peers had recovered its others (it woke from a freeze and
        dequeued before it exited), or whose recovery met a database outage."""
        if not holders:
            return
        with self._store.transaction() as conn:
            alive = {row[0] for row in conn.execute("SELECT executor FROM workers")}
        gone = sorted(holders - alive)
        if gone and _dbos.recover(gone, self._store):
            self._tell(f"workflows held by {', '.join(gone)} (no longer alive) queued again")

    def _wake_lost(self) -> list[str]:
        """Queue again the parked runs whose children all ended but whose wake
        was lost (the worker that owed it died first); their ids."""
        return [
            self._queued_again(run_id, "was parked with no child running")
            for run_id in self._store.parked_ready()
            if self._store.wake(run_id) is not None
        ]

    def _queued_again(self, run_id: str, why: str) -> str:
        """Queue ``run_id`` (its attempt just moved on) for the sweep, saying why; its id."""
        assert self._queue is not None
        self._queue.enqueue_now(run_id)
        self._tell(f"run {run_id} {why}; queued again")
        return run_id

    def _tell(self, what: str) -> None:
        """One line of what this worker did to others' runs, and when (wall clock:
        to be read beside theirs)."""
        sys.stderr.write(f"worker {self.executor_id}: {what} (at {time.time():.3f})\n")

    def _heartbeat(self, first: bool = False, judge: bool = True) -> list[str] | None:
        """Beat; if ``judge``, claim the workers dead since (their rows go); their
        ids. None: this worker's own row is gone (peers declared it dead)."""
        now = time.time()
        with self._store.transaction() as conn:
            if first:
                conn.execute(
                    "INSERT INTO workers (executor, pid, host, started_at, beat_at) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (executor) DO UPDATE SET "
                    "beat_at = excluded.beat_at, pid = excluded.pid, host = excluded.host",
                    (self.executor_id, os.getpid(), socket.gethostname(), now, now),
                )
            elif (
                conn.execute(
                    "UPDATE workers SET beat_at = %s WHERE executor = %s", (now, self.executor_id)
                ).rowcount
                == 0
            ):
                return None
            if not judge:
                return []
            rows = conn.execute(
                "DELETE FROM workers WHERE beat_at < %s AND executor <> %s RETURNING executor",
                (now - self.dead_after_s, self.executor_id),
            ).fetchall()
        return [row[0] for row in rows]
