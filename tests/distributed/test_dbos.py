"""The DBOS queue: a client's cancel never waits on a workflow a stalled worker holds."""

from __future__ import annotations

import threading
import time

import psycopg

from orchestra.distributed import Cluster, submit
from orchestra.distributed._dbos import system_url, workflow_id
from orchestra.distributed._worker import agent_of_reference

WORKFLOW_ROW = "SELECT 1 FROM dbos.workflow_status WHERE workflow_uuid = %s FOR UPDATE"


def test_a_cancel_does_not_wait_on_a_workflow_row_held_by_a_stalled_worker(pg_url: str) -> None:
    """A worker frozen inside a DBOS transaction keeps its workflow's row lock; the
    cancel's run stops are in the store, so taking the workflow off the queue is
    best effort: it returns at once (the workflow ends at its next step)."""
    with Cluster(pg_url) as cluster:
        agent = agent_of_reference("tests.distributed.agents:chaos_plain_tree")
        run_id = submit(cluster, agent, "Scan the archives, children=2.")
        wid = workflow_id(run_id, 0)
        with psycopg.connect(system_url(pg_url)) as stalled:  # a transaction left open
            assert stalled.execute(WORKFLOW_ROW, (wid,)).fetchall() == [(1,)]
            took: list[float] = []

            def cancel() -> None:
                began = time.monotonic()
                cluster.queue.cancel([wid])
                took.append(time.monotonic() - began)

            thread = threading.Thread(target=cancel, daemon=True)
            thread.start()
            thread.join(10)
            stalled.rollback()
            thread.join(10)
        # a client waits at most CLIENT_LOCK_TIMEOUT_MS (100 ms) for the row: 1 s is
        # 10x that for a loaded machine; waiting on the lock would take the 10 s join
        assert took and took[0] < 1.0, took
        assert set(cluster.queue.unfinished([wid])) == {wid}  # left for its next step to end
        cluster.queue.cancel([wid])  # once free, taken off the queue
        assert cluster.queue.unfinished([wid]) == {}
