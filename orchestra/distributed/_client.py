"""Submitting, cancelling and resuming runs that workers execute.

Every function here works from any process that can reach the database: the
state lives in PostgreSQL (runs, ledger, cancel requests) and the queue is
DBOS's, in the same server.

- :func:`submit` saves a new root run, opens its ledger row and queues it.
- :func:`cancel_tree` records one cancel request for the whole tree (each
  worker's watcher cancels the runs it executes, mid-turn), stops at once the
  runs no worker has taken up (and takes their workflows off the queue), and
  waits until no run of the tree is running.
- :func:`resume_tree` queues an interrupted tree's root again (after an
  approval, say): whichever worker takes it continues it, and re-queues the
  interrupted child that waited for the decision.
"""

from __future__ import annotations

import time
from typing import Any

from .._agent import Agent
from .._exceptions import StateError
from .._execute import new_state, reopen_state
from .._state import Limits, RunState, Status
from ._dbos import DBOSQueue, migrate, workflow_id
from ._ledger import PostgresLedger

__all__ = ["Cluster", "cancel_tree", "ledger_rows", "resume_tree", "submit"]

CANCEL_WAIT_S = 30.0
"""How long :func:`cancel_tree` waits for the tree's runs to stop."""


class Cluster:
    """A client's handle on the workers' database: store, ledger, queue."""

    def __init__(self, database: str) -> None:
        from ._pgstore import PostgresStore

        self.store = PostgresStore(database)
        try:
            self.ledger = PostgresLedger(store=self.store, executor="client")
            self.ledger.create()
            migrate(database, self.store)
            self.queue = DBOSQueue(database, self.store.attempt)
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
) -> str:
    """Save and queue a new root run of ``agent``; its run id.

    ``metadata`` must let a worker rebuild the agent: a CLI recipe, or
    ``{AGENTS_KEY: "module:attr"}``.
    """
    limits = (limits or agent.limits).anchored(time.time())
    state = new_state(agent, task, limits, metadata=metadata)
    cluster.store.save(state)
    cluster.ledger.open_node(state, 0)
    cluster.queue.enqueue_now(state.run_id)
    return state.run_id


def cancel_tree(
    cluster: Cluster, run_id: str, reason: str = "cancelled", wait_s: float = CANCEL_WAIT_S
) -> list[RunState]:
    """Cancel every run of ``run_id``'s tree, wherever it executes; the tree's states.

    Returns once no run of the tree is ``running`` (or after ``wait_s``).
    """
    root_id = cluster.store.load(run_id).root_id
    cluster.store.request_cancel(root_id, reason)
    stopped = cluster.store.stop_unclaimed(root_id, reason)
    cluster.queue.cancel([_current_workflow(cluster, r) for r in stopped])
    deadline = time.monotonic() + wait_s
    while True:
        states = cluster.store.tree(root_id)
        if all(s.status is not Status.RUNNING for s in states) or time.monotonic() > deadline:
            return states
        time.sleep(0.01)


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
