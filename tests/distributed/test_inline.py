"""Children executed inline, inside their parent's step: the store's side.

An inline child has no workflow, claim or park of its own; its row names the
run whose step executes it (``step_of``). The sweep must leave it to that run
while that run goes on, and take it up once that run has ended without it; a
cancel must stop it with its parent when no worker holds the parent; only the
holder of the parent's current claim may mark it. (Trees executed inline on
real workers, killed mid-write and cancelled: ``test_cluster.py``.)
"""

from __future__ import annotations

import time

import psycopg
import pytest
from test_pgstore import make_state, query

from orchestra import Status
from orchestra._exceptions import LeaseLost
from orchestra.distributed import PostgresStore
from orchestra.distributed._pgstore import PG_SCHEMA_VERSION


def _inline_family(store: PostgresStore) -> None:
    """A running root ``p`` claimed by ``w1``, and ``c`` executed inside its step."""
    _inline_family_of(store, "p")


def _inline_family_of(store: PostgresStore, root: str) -> None:
    store.save(make_state(root))
    claimed = store.claim(root, "w1")
    assert claimed is not None
    store.save(make_state("c", root, parent_id=root), fence=claimed[1])
    store.mark_inline("c", claimed[1])


def test_a_child_is_marked_inline_by_its_parents_claim_only(store: PostgresStore) -> None:
    store.save(make_state("p"))
    store.save(make_state("c", "p", parent_id="p"))
    stale = store.claim("p", "w1")
    assert stale is not None and store.claim("p", "w2") is not None
    with pytest.raises(LeaseLost):
        store.mark_inline("c", stale[1])
    assert store.step_of("c") is None  # a step that lost its claim marks nothing
    _inline_family(store)
    assert store.step_of("c") == "p"
    assert store.step_of("p") is None


def test_the_sweep_leaves_an_inline_child_to_its_running_parent(store: PostgresStore) -> None:
    _inline_family(store)
    later = time.time() + 10
    # the parent's workflow covers both: only the parent can be found stale
    assert [(s.run_id, s.attempt) for s in store.stale_running(later)] == [("p", 0)]
    parent = store.load("p")
    parent.status = Status.COMPLETED  # it ended without its child (a crash in between)
    store.save(parent)
    (orphan,) = store.stale_running(later)  # an orphan: taken up on its own
    assert (orphan.run_id, orphan.attempt) == ("c", 0)
    assert store.requeue_if(orphan) == 1
    assert store.step_of("c") is None  # queued now: it steps on its own


def test_the_sweep_leaves_a_run_claimed_after_it_was_found_stale(store: PostgresStore) -> None:
    """A worker's sweep finds a run left running with no workflow; before it
    queues it again, another worker's workflow of that run begins and claims it
    (a parent taken up after its worker died queued its orphaned child, say).
    The sweep's requeue is refused: it would take the run from a worker
    executing it, and a second workflow would execute it at the same time."""
    _inline_family(store)
    parent = store.load("p")
    parent.status = Status.COMPLETED
    store.save(parent)
    (orphan,) = store.stale_running(time.time() + 10)
    assert store.claim("c", "w1") is not None  # its workflow began elsewhere
    assert store.requeue_if(orphan) is None
    assert store.attempt("c") == 0


def test_a_cancel_stops_an_inline_child_with_its_unclaimed_parent(
    store: PostgresStore,
) -> None:
    _inline_family(store)
    # the parent's worker holds both: its watcher stops them (nothing stopped here)
    assert store.stop_unclaimed("p", "cancelled") == []
    store.requeue("p")  # its worker gone: the parent waits in the queue
    assert store.stop_unclaimed("p", "cancelled") == ["c", "p"]
    assert {store.status("c"), store.status("p")} == {Status.INTERRUPTED}


def test_a_version_5_database_gets_the_step_column(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.save(make_state("p"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN step_of")
        conn.execute("UPDATE orchestra_schema SET version = 5")
    with PostgresStore(pg_url) as store:
        assert store.step_of("p") is None  # the run saved before is one that steps on its own
        _inline_family_of(store, "q")
        assert store.step_of("c") == "q"
    assert query(pg_url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]
