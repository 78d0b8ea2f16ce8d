"""The store contract (orchestra/_stores/contract.py), held against every store.

Each test runs on the memory store, the SQLite store and, when PostgreSQL is
at hand (``ORCHESTRA_PG_URL``; marked ``postgres``), the PostgreSQL store.
The cancel-request and lease tests run on the stores that offer them (the
durable ones); the memory store must say it offers neither, and refuse a
fence it never granted.
"""

from __future__ import annotations

import pytest

from orchestra import LeaseError, LeaseLost, MemoryStore, RunNotFound
from orchestra._exceptions import ConfigError, StateError
from orchestra._state import RunState, Status
from orchestra._stores.contract import DurableStore, Store, StreamNote
from orchestra._stores.fence import Fence


def make_state(
    run_id: str, root_id: str | None = None, *, created_at: float = 1.0, updated_at: float = 1.0
) -> RunState:
    return RunState(
        run_id=run_id,
        root_id=root_id or run_id,
        parent_id=None if root_id in (None, run_id) else root_id,
        agent="a",
        model="m",
        messages=[{"role": "user", "content": run_id}],
        created_at=created_at,
        updated_at=updated_at,
    )


def event(run_id: str, root_id: str, type_: str) -> dict[str, object]:
    return {"run_id": run_id, "root_id": root_id, "type": type_, "at": 1.0}


@pytest.fixture
def store(each_store: Store) -> Store:
    return each_store


@pytest.fixture
def durable(each_durable: DurableStore) -> DurableStore:
    return each_durable


# -- every store ----------------------------------------------------------------------


def test_a_saved_state_loads_back_equal_and_apart(store: Store) -> None:
    saved = make_state("r1")
    store.save(saved, [event("r1", "r1", "run_started")])
    saved.messages.append({"role": "assistant", "content": "later"})
    assert store.load("r1").messages == [{"role": "user", "content": "r1"}]
    store.save(saved)
    assert store.load("r1") == saved
    with pytest.raises(RunNotFound):
        store.load("nope")


def test_save_many_is_all_or_none(store: Store) -> None:
    good = make_state("good")
    bad = make_state("bad")
    bad.metadata = {"x": object()}  # type: ignore[dict-item]  # not JSON
    with pytest.raises(StateError):
        store.save_many([good, bad])
    with pytest.raises(RunNotFound):
        store.load("good")
    store.save_many([good, make_state("other")], [event("good", "good", "turn")])
    assert [s.run_id for s in store.list_runs()] == ["good", "other"]


def test_a_tree_is_its_root_then_its_runs_by_creation(store: Store) -> None:
    for s in (
        make_state("c2", "root", created_at=3.0),
        make_state("root", created_at=5.0),
        make_state("c1", "root", created_at=2.0),
        make_state("elsewhere"),
    ):
        store.save(s)
    assert [s.run_id for s in store.tree("root")] == ["root", "c1", "c2"]
    with pytest.raises(RunNotFound):
        store.tree("nope")


def test_list_runs_newest_first_roots_only_unless_asked(store: Store) -> None:
    store.save(make_state("old", updated_at=1.0))
    store.save(make_state("new", updated_at=9.0))
    store.save(make_state("kid", "old", updated_at=5.0))
    assert [s.run_id for s in store.list_runs()] == ["new", "old"]
    assert [s.run_id for s in store.list_runs(roots_only=False)] == ["new", "kid", "old"]
    assert [s.run_id for s in store.list_runs(limit=1)] == ["new"]
    with pytest.raises(ConfigError):
        store.list_runs(limit=-1)


def test_resolve_a_prefix(store: Store) -> None:
    for run_id in ("run_abc1", "run_abc2", "run_xyz"):
        store.save(make_state(run_id))
    assert store.resolve("run_x") == "run_xyz"
    assert store.resolve("run_abc1") == "run_abc1"
    with pytest.raises(StateError, match="ambiguous"):
        store.resolve("run_abc")
    with pytest.raises(RunNotFound):
        store.resolve("zzz")
    with pytest.raises(ConfigError):
        store.resolve("")


def test_events_by_run_and_by_tree_in_order(store: Store) -> None:
    store.save(make_state("root"), [event("root", "root", "run_started")])
    store.save(make_state("kid", "root"), [event("kid", "root", "turn")])
    store.add_events([event("root", "root", "run_stopped")])
    assert [e["type"] for e in store.events(root_id="root")] == [
        "run_started",
        "turn",
        "run_stopped",
    ]
    assert [e["type"] for e in store.events(run_id="kid")] == ["turn"]
    with pytest.raises(StateError, match="an event needs"):
        store.add_events([{"run_id": "root"}])


def test_a_fence_the_store_never_granted_is_refused(store: Store) -> None:
    stranger = Fence(scope="lease", key="r1", holder="nobody", epoch=7)
    with pytest.raises(LeaseLost):
        store.save(make_state("r1"), fence=stranger)
    with pytest.raises(LeaseLost):
        store.add_events([event("r1", "r1", "turn")], fence=stranger)
    with pytest.raises(RunNotFound):
        store.load("r1")


def test_the_memory_store_offers_no_inbox_and_no_leases() -> None:
    store = MemoryStore()
    assert store.inbox is None and store.leases is None


# -- stores shared by processes ---------------------------------------------------------


def test_cancel_requests_are_kept_until_cleared(durable: DurableStore) -> None:
    durable.save(make_state("root"))
    durable.save(make_state("kid", "root"))
    durable.save(make_state("other"))
    durable.request_cancel("kid", "first")
    durable.request_cancel("kid", "stop it")
    durable.request_cancel("other", "too")
    assert durable.pending_cancels("root") == {"kid": "stop it"}
    assert durable.pending_cancels() == {"kid": "stop it", "other": "too"}
    durable.clear_cancel("kid")
    assert durable.pending_cancels("root") == {}
    durable.request_cancel("root", "all")
    durable.clear_cancels("root")
    assert durable.pending_cancels() == {"other": "too"}
    with pytest.raises(RunNotFound):
        durable.request_cancel("nope", "x")


def test_leases_are_taken_once_and_fence_every_writer_before(durable: DurableStore) -> None:
    first = durable.acquire_lease("root", "a", ttl=30.0, now=1000.0)
    with pytest.raises(LeaseError, match="leased by 'a'"):
        durable.acquire_lease("root", "b", ttl=30.0, now=1010.0)
    durable.save(make_state("root"), fence=first)
    taken = durable.acquire_lease("root", "b", ttl=30.0, now=1031.0)  # a's expired
    assert (first.epoch, taken.epoch) == (1, 2)
    assert durable.lease_holder("root", now=1032.0) == "b"
    with pytest.raises(LeaseLost, match="'a' lost the lease on run tree 'root'"):
        durable.save(make_state("root"), fence=first)
    with pytest.raises(LeaseError):
        durable.renew_lease("root", "a", now=1032.0)
    durable.renew_lease("root", "b", ttl=30.0, now=1032.0)
    durable.request_cancel("root", "stop")
    durable.let_go("root", "b")
    assert durable.pending_cancels() == {}
    assert durable.lease_holder("root") is None
    with pytest.raises(LeaseLost):
        durable.save(make_state("root"), fence=taken)
    assert durable.acquire_lease("root", "a").epoch == 3
    durable.release_lease("root", "b")  # another owner's lease is left alone
    assert durable.lease_holder("root") == "a"
    assert durable.load("root").status is Status.RUNNING


# -- stream notes ---------------------------------------------------------------------


def test_stream_notes_are_kept_per_run_and_cleared(durable: DurableStore) -> None:
    notes = durable.stream_notes
    notes.note_stream("r1", "root", StreamNote(text="errors.log men", tokens=3))
    notes.note_stream("r2", "root", StreamNote(text="Findings", tokens=1))
    noted = StreamNote(text="errors.log mentions a timeout", tokens=6, prompt=300, cap=1024)
    notes.note_stream("r1", "root", noted)
    notes.note_stream("x", "other", StreamNote(text="elsewhere"))
    assert notes.streaming_texts("root") == {
        "r1": "errors.log mentions a timeout",
        "r2": "Findings",
    }
    assert notes.stream_note("r1") == noted and notes.stream_note("nope") is None
    notes.note_stream("r1", "root", None)
    assert notes.streaming_texts("root") == {"r2": "Findings"} and notes.stream_note("r1") is None
    assert notes.streaming_texts("nothing") == {}


def test_a_save_clears_the_run_s_stream_note(durable: DurableStore) -> None:
    # the save that keeps a stream's charge is the one that forgets the stream
    durable.save(make_state("r1"))
    durable.stream_notes.note_stream("r1", "r1", StreamNote(text="half", tokens=2))
    durable.stream_notes.note_stream("r2", "r1", StreamNote(text="other", tokens=1))
    durable.save(make_state("r1"))
    assert (
        durable.stream_notes.stream_note("r1") is None
        and durable.stream_notes.stream_note("r2") is not None
    )


def test_a_memory_store_keeps_no_stream_notes(each_store: Store) -> None:
    assert (each_store.stream_notes is None) == (type(each_store).__name__ == "MemoryStore")
