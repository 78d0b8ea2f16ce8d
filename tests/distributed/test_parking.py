"""Parking: a run waiting for its children holds no worker slot.

The store's side (park, wake, the sweep's look for lost wakes) on a real
database, then bursts of trees larger than the cluster's slots on real
worker processes: before parking, parents held every slot while the
children they waited for could never start, and the cluster stopped for good.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from distributed_support import wait_until, workers
from test_pgstore import make_state, query

from orchestra import Limits, Status
from orchestra._exceptions import LeaseLost
from orchestra._recipes.recipe import Recipe
from orchestra.distributed import Cluster, PostgresStore, submit
from orchestra.distributed._pgstore import PG_SCHEMA_VERSION

BURST_S = 180.0
"""Generous: a loaded 2-core machine runs these trees in a few seconds each;
the wait is for the state the test needs, polled, not a sleep."""


def _family(store: PostgresStore, *children: str) -> None:
    """A running root ``p`` claimed by ``w1``, with running children."""
    store.save(make_state("p"))
    for child in children:
        store.save(make_state(child, "p", parent_id="p"))


def _end(store: PostgresStore, run_id: str) -> None:
    state = store.load(run_id)
    state.status = Status.COMPLETED
    store.save(state)


def test_a_parent_parks_only_while_a_child_runs(store: PostgresStore, pg_url: str) -> None:
    _family(store, "c1")
    claimed = store.claim("p", "w1")
    assert claimed is not None
    assert store.park("p", claimed[1]) is True
    assert store.parked("p")
    assert query(pg_url, "SELECT executor FROM runs WHERE run_id = 'p'") == [(None,)]
    assert store.claim("p", "w2") is None  # a parked run is nobody's to step
    _end(store, "c1")
    assert store.wake("p") == 1
    assert not store.parked("p")
    again = store.claim("p", "w2")
    assert again is not None
    assert store.park("p", again[1]) is False  # its child ended: it steps on instead


def test_a_wake_waits_for_the_last_child(store: PostgresStore) -> None:
    _family(store, "c1", "c2")
    claimed = store.claim("p", "w1")
    assert claimed is not None and store.park("p", claimed[1])
    _end(store, "c1")
    assert store.wake("p") is None
    assert store.parked_ready() == []
    _end(store, "c2")
    assert store.parked_ready() == ["p"]  # the sweep finds a wake that was lost
    assert store.wake("p") == 1
    assert store.wake("p") is None  # once: a second worker's wake does nothing
    assert store.parked_ready() == []


def test_a_park_under_a_lost_claim_writes_nothing(store: PostgresStore) -> None:
    _family(store, "c1")
    stale = store.claim("p", "w1")
    assert stale is not None and store.claim("p", "w2") is not None
    with pytest.raises(LeaseLost):
        store.park("p", stale[1])
    assert not store.parked("p")


def test_a_stop_or_a_requeue_unparks(store: PostgresStore) -> None:
    _family(store, "c1")
    claimed = store.claim("p", "w1")
    assert claimed is not None and store.park("p", claimed[1])
    assert store.stop_unclaimed("p", "cancelled") == ["c1", "p"]  # parked: no executor
    assert not store.parked("p")
    assert store.wake("p") is None  # a stopped run is never queued again by a wake
    assert store.stale_running(time.time() + 10) == []
    _family(store, "c2")
    claimed = store.claim("p", "w1")
    assert claimed is not None and store.park("p", claimed[1])
    stale = store.stale_running(time.time() + 10)
    assert [(s.run_id, s.attempt) for s in stale] == [("c2", 0)]  # a parked run is not stale
    store.requeue("p")
    assert not store.parked("p")


def _burst(pg_url: str, sandbox: Path, trees: int) -> list[str]:
    """Submit ``trees`` research trees (a root and 3 children) at once; their roots."""
    recipe = Recipe(directory=str(sandbox), scenario="research")
    limits = Limits(max_turns=20, max_budget_usd=1.0)
    with Cluster(pg_url) as cluster:
        agent = recipe.agent(limits)
        metadata = recipe.metadata()
        return [
            submit(cluster, agent, "What failed?", limits=limits, metadata=metadata)
            for _ in range(trees)
        ]


def _statuses(pg_url: str) -> Counter[str]:
    return Counter(status for (status,) in query(pg_url, "SELECT status FROM runs"))


@pytest.mark.parametrize(
    ("count", "concurrency", "trees", "inline"), [(1, 1, 3, None), (2, 2, 12, None), (1, 1, 3, 0)]
)
def test_a_burst_larger_than_the_slots_completes(
    pg_url: str,
    tmp_path: Path,
    sandbox: Path,
    count: int,
    concurrency: int,
    trees: int,
    inline: int | None,
) -> None:
    """3 trees on 1 slot, and 12 trees (48 runs) on 2 workers × 2 slots: every
    root holds a slot before any child is queued, so without parking none ends.

    With every child queued (``inline`` 0) and no look on the clock (an hour
    apart), every run is taken because its enqueue was announced (roots,
    children, woken parents) or because a slot freed up for it: nothing waits
    for a poll."""
    more = ("--look-every", "3600") if inline == 0 else ()
    with workers(pg_url, tmp_path, count, {}, concurrency=concurrency, inline=inline, more=more):
        _burst(pg_url, sandbox, trees)

        def settled() -> bool:
            return _statuses(pg_url) == Counter(completed=4 * trees)

        wait_until(settled, BURST_S, f"{4 * trees} runs completed (now {_statuses(pg_url)})")


def test_a_version_3_database_gets_parking(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.save(make_state("p"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX runs_parent_id, runs_parked")
        conn.execute("ALTER TABLE runs DROP COLUMN parked")
        conn.execute("UPDATE orchestra_schema SET version = 3")
    with PostgresStore(pg_url) as store:
        assert not store.parked("p")
        store.save(make_state("c", "p", parent_id="p"))
        claimed = store.claim("p", "w1")
        assert claimed is not None and store.park("p", claimed[1])
    assert query(pg_url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]
