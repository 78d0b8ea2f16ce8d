"""Submitting, cancelling and resuming runs that workers execute.

Every function here works from any process that can reach the database: the
state lives in PostgreSQL (runs, ledger, cancel requests) and the queue is
DBOS's, in the same server.

- :func:`submit` saves a new root run, opens its ledger row and queues it.
- :func:`cancel_tree` records one cancel request for the whole tree (each
  worker's watcher cancels the runs it executes, mid-turn), stops at once the
  runs no worker has taken up (and takes their workflows off the queue),
  stops in the database those still running after a short grace (a worker
  dead or stalled: fenced out), and waits until no run of the tree is running.
- :func:`resume_tree` queues an interrupted tree's root again (after an
  approval, say): whichever worker takes it continues it, and re-queues the
  interrupted child that waited for the decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from .._agent import Agent
from .._core.execute import instruct_state, new_state, reopen_state
from .._deps import DEPS_KEY, check_deps, deps_of_reference
from .._exceptions import StateError
from .._settings import ModelSettings
from .._state import Limits, RunState, Status
from ._dbos import DBOSQueue, migrate, workflow_id
from ._ledger import PostgresLedger
from ._threads import while_away

__all__ = ["Cluster", "cancel_tree", "ledger_rows", "resume_tree", "submit"]

CANCEL_WAIT_S = 30.0
"""How long :func:`cancel_tree` waits for the tree's runs to stop."""
CANCEL_GRACE_S = 0.3
"""How long live workers get to stop a cancelled tree's runs themselves before
the rest are stopped in the database."""

_T = TypeVar("_T")


class Cluster:
    """A client's handle on the workers' database: store, ledger, queue."""

    def __init__(self, database: str) -> None:
        from ._pgstore import PostgresStore

        self.store = PostgresStore(database)
        try:
            self.ledger = PostgresLedger(store=self.store, executor="client")
            self.ledger.create()
            migrate(database, self.store)
            # a cancel retries within its own deadline: DBOS's backoff (up to a minute
            # after a PostgreSQL restart) once held one for 59.5 s in the chaos test
            self.queue = DBOSQueue(database, self.store, dbos_retries=False)
        except BaseException:
            self.store.close()
            raise

    def close(self) -> None:
        """Close the connections."""
        self.queue.close()
        self.store.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def submit(
    cluster: Cluster,
    agent: Agent,
    task: str,
    *,
    limits: Limits | None = None,
    metadata: dict[str, str] | None = None,
    run_id: str | None = None,
    settings: ModelSettings | None = None,
    deps: str | None = None,
) -> str:
    """Save and queue a new root run of ``agent``; its run id (``run_id`` if given:
    a client may follow the tree's events before it exists). ``settings``: how
    the run asks its model, over its agent's (saved with it: any worker uses them).

    ``metadata`` must let a worker rebuild the agent: a CLI recipe, or
    ``{AGENTS_KEY: "module:attr"}``. ``deps``: the tree's dependencies as
    ``"module:attr"`` (a value or a function returning one), made by each
    worker that executes a run of the tree (the reference is saved, never
    the value; see :mod:`orchestra._deps`).

    Raises:
        ConfigError: ``deps`` cannot be made, or are not what the agent needs.
    """
    limits = (limits or agent.limits).anchored(time.time())
    metadata = dict(metadata or {})
    made = None
    if deps is not None:
        metadata[DEPS_KEY] = deps
        made = deps_of_reference(deps)  # here too: refused now rather than on a worker
    check_deps(agent.name, agent.deps_type, made, "start")
    state = new_state(agent, task, limits, None, None, run_id, metadata, settings)
    instruct_state(state, agent, made, 0, 0.0)
    cluster.store.save(state)
    cluster.ledger.open_node(state, 0)
    cluster.queue.enqueue_now(state.run_id)
    return state.run_id


def cancel_tree(
    cluster: Cluster,
    run_id: str,
    reason: str = "cancelled",
    wait_s: float = CANCEL_WAIT_S,
    grace_s: float = CANCEL_GRACE_S,
) -> list[RunState]:
    """Cancel every run of ``run_id``'s tree, wherever it executes; the tree's states.

    One cancel request for the tree: each live worker's watcher applies it to
    the runs it executes (their spend recorded as they stop). The runs no
    worker has taken up are stopped in the database at once; those still
    running after ``grace_s`` (their worker dead, stalled, or cut off from
    the database) are stopped there too, each taking its next epoch so that
    their worker, should it wake, saves nothing more. Then the saved tree
    costs are set to the ledger's. While the database is away (a restart),
    each step is tried again until ``wait_s`` runs out.

    Returns once no run of the tree is ``running`` (or after ``wait_s``).
    """
    deadline = time.monotonic() + wait_s
    store = cluster.store
    root_id = _retrying(deadline, lambda: store.load(run_id).root_id)
    _retrying(deadline, lambda: store.request_cancel(root_id, reason))
    _stop(cluster, deadline, lambda: store.stop_unclaimed(root_id, reason))
    states = _running_until(cluster, root_id, time.monotonic() + min(grace_s, wait_s))
    if any(s.status is Status.RUNNING for s in states):
        _stop(cluster, deadline, lambda: store.stop_running(root_id, reason))
    _retrying(deadline, lambda: cluster.ledger.reconcile(root_id))
    return _running_until(cluster, root_id, deadline)


def _stop(cluster: Cluster, deadline: float, stop: Callable[[], list[str]]) -> None:
    """Stop runs in the database and take their workflows off the queue."""
    stopped = _retrying(deadline, stop)
    _retrying(
        deadline, lambda: cluster.queue.cancel([_current_workflow(cluster, r) for r in stopped])
    )


def _running_until(cluster: Cluster, root_id: str, until: float) -> list[RunState]:
    """The tree's states once none is running, or at ``until``."""
    while True:
        states = _retrying(until, lambda: cluster.store.tree(root_id))
        if all(s.status is not Status.RUNNING for s in states) or time.monotonic() > until:
            return states
        time.sleep(0.01)


def _retrying(deadline: float, call: Callable[[], _T]) -> _T:
    """``call()``, tried again every 50 ms while the database is away, until ``deadline``."""
    return while_away(call, patience_s=deadline - time.monotonic(), poll_s=0.05)


def _current_workflow(cluster: Cluster, run_id: str) -> str:
    return workflow_id(run_id, cluster.store.attempt(run_id))


def resume_tree(cluster: Cluster, run_id: str) -> str:
    """Queue ``run_id``'s tree again from its root; the root's new workflow id.

    Raises:
        StateError: the root cannot be resumed (it ended for good, or runs).
    """
    root = cluster.store.load(cluster.store.load(run_id).root_id)
    if root.status is Status.RUNNING:
        raise StateError(f"run {root.run_id} is running; nothing to resume")
    reopen_state(root, None, "", time.time)
    cluster.store.clear_cancels(root.run_id)
    root.updated_at = time.time()
    cluster.store.save(root)
    cluster.store.requeue(root.run_id)
    return cluster.queue.enqueue_now(root.run_id)


def ledger_rows(cluster: Cluster, root_id: str) -> list[dict[str, Any]]:
    """The tree's spend rows, oldest first (for checks and reports)."""
    with cluster.store.transaction() as conn:
        rows = conn.execute(
            "SELECT run_id, turn, model_calls, cost_pico, lost, executor FROM ledger_spend "
            "WHERE root_id = %s ORDER BY seq",
            (root_id,),
        ).fetchall()
    keys = ("run_id", "turn", "model_calls", "cost_pico", "lost", "executor")
    return [dict(zip(keys, row, strict=True)) for row in rows]
