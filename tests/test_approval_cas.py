"""Human decisions are compare-and-swap, on every store (memory, SQLite, PostgreSQL).

An approver that read a run waiting for a human, then stalled, must not
write its decision over what happened since: not turn a finished run back,
not approve a question the run no longer asks (a write that started after a
first approval and was left in doubt). Inside its transaction (between the
store's read and its write) it holds the run: no other writer gets in. A
repeated decision writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestra import MemoryStore, SQLiteStore, StateError, StoreError
from orchestra._approval import approve, reject
from orchestra._state import Approval, Interruption, InterruptionKind, RunState, Status
from orchestra._stores import sqlite
from orchestra._stores.contract import DurableStore, Store

ARGS = {"path": "access.log"}
APPROVED = Approval(call_id="c1", arguments=ARGS)


def waiting(
    kind: InterruptionKind = InterruptionKind.APPROVAL, *, run_id: str = "r", holder: str = "r"
) -> RunState:
    """Run ``run_id`` stopped for a human on call c1 (delete_file access.log) of ``holder``."""
    return RunState(
        run_id=run_id,
        root_id="r",
        parent_id=None if run_id == "r" else "r",
        agent="a",
        model="m",
        status=Status.INTERRUPTED,
        messages=[{"role": "user", "content": "free some space"}],
        interruption=Interruption(
            kind=kind,
            reason="delete_file needs approval",
            run_id=holder,
            call_id="c1",
            tool="delete_file",
            arguments=ARGS,
        ),
        created_at=1.0,
        updated_at=2.0,
    )


def completed(state: RunState) -> RunState:
    """``state`` after its approved call ran and the run finished."""
    state.status, state.interruption, state.reason = Status.COMPLETED, None, "answered"
    state.approvals = []  # spent when the write started
    state.results["c1"] = "Deleted access.log."
    state.updated_at = 3.0
    return state


def other_writer(store: Store) -> Store:
    """Another process's handle on the same store (the same object in memory)."""
    if isinstance(store, MemoryStore):
        return store
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    from orchestra.distributed import PostgresStore

    assert isinstance(store, PostgresStore)
    return PostgresStore(store.path)


def impatient_writer(store: DurableStore, monkeypatch: pytest.MonkeyPatch) -> DurableStore:
    """Another process's handle on ``store`` that fails at once (``StoreError``)
    where it would wait for a lock another writer holds."""
    if isinstance(store, SQLiteStore):
        monkeypatch.setattr(sqlite, "BUSY_TIMEOUT_S", 0.0)
        return SQLiteStore(store.path)
    from orchestra.distributed import PostgresStore

    url = urlsplit(str(store.path))
    query = "options=-c%20lock_timeout%3D50" + (f"&{url.query}" if url.query else "")
    return PostgresStore(url._replace(query=query).geturl())


class RowWrites:
    """Counts the writes of run rows ``store`` makes, whatever the way in (a save,
    an update): the SQL stores' one writer of states, the memory store's."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        name = "save_many" if isinstance(store, MemoryStore) else "_write_rows"
        real = getattr(store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(store, name, counted)


# -- a repeated decision ------------------------------------------------------------


def test_a_repeated_approval_writes_nothing(
    each_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    each_store.save(waiting())
    writes = RowWrites(each_store, monkeypatch)
    approve(each_store, "r")
    assert writes.count == 1
    decided = each_store.load("r")
    assert decided.approvals == [APPROVED]
    approve(each_store, "r")
    approve(each_store, "r", "c1")
    assert writes.count == 1
    assert each_store.load("r") == decided and each_store.load("r").updated_at == 2.0
    with pytest.raises(StateError, match="already approved"):
        reject(each_store, "r", reason="no")
    assert writes.count == 1
    assert each_store.load("r") == decided


def test_a_repeated_rejection_writes_nothing(
    each_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    each_store.save(waiting())
    writes = RowWrites(each_store, monkeypatch)
    reject(each_store, "r", reason="keep it")
    decided = each_store.load("r")
    reject(each_store, "r", reason=" keep it ")
    assert writes.count == 1
    with pytest.raises(StateError, match="rejected"):
        reject(each_store, "r", reason="another reason")
    with pytest.raises(StateError, match="rejected"):
        approve(each_store, "r")
    assert writes.count == 1
    assert each_store.load("r") == decided and decided.rejections == {"c1": "keep it"}


# -- a decision on a run that went on ---------------------------------------------------


def test_a_decision_on_a_finished_run_is_refused(
    each_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = completed(waiting())
    each_store.save(done)
    writes = RowWrites(each_store, monkeypatch)
    with pytest.raises(StateError, match="waits for no approval"):
        approve(each_store, "r")
    with pytest.raises(StateError, match="waits for no approval"):
        reject(each_store, "r", reason="no")
    assert writes.count == 0
    assert each_store.load("r") == done


@pytest.mark.parametrize("decide", [approve, reject])
def test_a_decision_for_a_child_that_finished_is_refused(
    each_store: Store, monkeypatch: pytest.MonkeyPatch, decide: Callable[..., Interruption]
) -> None:
    """The root still shows the question its child asked, but the child (which
    holds the call, and is what a decision writes) has finished since."""
    each_store.save(waiting(holder="child"))
    child = completed(waiting(run_id="child", holder="child"))
    each_store.save(child)
    writes = RowWrites(each_store, monkeypatch)
    with pytest.raises(StateError, match=r"run child is completed now.*nothing was written"):
        decide(each_store, "r", "c1")
    assert writes.count == 0
    assert each_store.load("child") == child


# -- an approver stalled between its read and its write ---------------------------------


class _Stalling:
    """``store`` as an approver sees it that stalls after its read (``waiting_call``)
    and before any write (an update, a save), until ``go_on`` is set."""

    def __init__(self, store: Store, read: threading.Event, go_on: threading.Event) -> None:
        self._store, self._read, self._go_on = store, read, go_on

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name not in ("update", "save", "save_many"):
            return attribute

        def stalled(*args: Any, **kwargs: Any) -> Any:
            self._read.set()
            self._go_on.wait(30)
            return attribute(*args, **kwargs)

        return stalled


def _start_approver(stalling: Any, stalled: threading.Event) -> tuple[threading.Thread, list[Any]]:
    """An approver of run r, in a thread, through ``stalling`` (a store that stalls
    it somewhere); returns once it is stalled. Its outcome lands in the list."""
    outcome: list[Any] = []

    def approver() -> None:
        try:
            outcome.append(approve(stalling, "r"))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=approver, daemon=True)  # never holds up the tests
    thread.start()
    assert stalled.wait(30)
    return thread, outcome


def _stalled_approval(store: Store) -> tuple[threading.Thread, threading.Event, list[Any]]:
    """An approver of run r that read it (it waits on c1) and stalls before its
    write; it goes on when the event is set. Its outcome lands in the list."""
    read, go_on = threading.Event(), threading.Event()
    thread, outcome = _start_approver(_Stalling(store, read, go_on), read)
    return thread, go_on, outcome


def test_a_late_approval_never_turns_a_finished_run_back(each_store: Store) -> None:
    each_store.save(waiting())
    late = other_writer(each_store)
    try:
        thread, go_on, outcome = _stalled_approval(late)
        approve(each_store, "r")  # another approver was quicker; the run resumed...
        done = completed(each_store.load("r"))
        each_store.save(done)  # ...and finished
        go_on.set()
        thread.join(30)
    finally:
        if late is not each_store:
            late.close()
    assert len(outcome) == 1 and isinstance(outcome[0], StateError), outcome
    assert "completed now" in str(outcome[0]) and "nothing was written" in str(outcome[0])
    assert each_store.load("r") == done  # not interrupted again, nothing approved to run again


def test_a_late_approval_does_not_answer_the_question_a_crash_asked_since(
    each_store: Store,
) -> None:
    """Approved, the write started and the process died: the run now asks whether
    the write happened (unknown_outcome). A stale approval of the first question
    must not approve running it again."""
    each_store.save(waiting())
    late = other_writer(each_store)
    try:
        thread, go_on, outcome = _stalled_approval(late)
        asked = waiting(InterruptionKind.UNKNOWN_OUTCOME)
        each_store.save(asked)
        go_on.set()
        thread.join(30)
    finally:
        if late is not each_store:
            late.close()
    assert len(outcome) == 1 and isinstance(outcome[0], StateError), outcome
    assert "unknown_outcome" in str(outcome[0])
    assert each_store.load("r") == asked


# -- an approver stalled inside its transaction -----------------------------------------


class _StallingInside:
    """``store`` as an approver sees it whose update stalls between the store's
    read and its write (the decision made, not yet written), until ``go_on`` is set."""

    def __init__(self, store: Store, inside: threading.Event, go_on: threading.Event) -> None:
        self._store, self._inside, self._go_on = store, inside, go_on

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def update(self, run_id: str, change: Callable[[RunState], RunState | None]) -> RunState:
        def stalled(state: RunState) -> RunState | None:
            changed = change(state)
            self._inside.set()
            self._go_on.wait(30)
            return changed

        return self._store.update(run_id, stalled)


def _approval_stalled_inside(
    store: Store, inside: threading.Event, go_on: threading.Event
) -> tuple[threading.Thread, list[Any]]:
    """An approver of run r stalled inside the store's update (see
    :class:`_StallingInside`). Its outcome lands in the list."""
    return _start_approver(_StallingInside(store, inside, go_on), inside)


def test_an_approver_holds_the_run_from_its_read_to_its_write(
    each_durable: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's write lock, PostgreSQL's row lock: a writer that comes while the
    approver is between the store's read and its write waits for it (here: it
    waits for no lock and fails), so the decision is written on the state it
    was checked against and nothing the other wrote is lost under it."""
    each_durable.save(waiting())
    other = impatient_writer(each_durable, monkeypatch)
    inside, go_on = threading.Event(), threading.Event()
    try:
        thread, outcome = _approval_stalled_inside(each_durable, inside, go_on)
        try:
            seen = other.load("r")  # a reader does not wait
            assert seen == waiting()
            with pytest.raises(StoreError, match="lock"):
                other.save(completed(seen))
        finally:
            go_on.set()
            thread.join(30)
        assert outcome == [waiting().interruption]
        assert each_durable.load("r").approvals == [APPROVED]
        done = completed(other.load("r"))
        other.save(done)  # once the decision is in, the run may go on and finish
        assert each_durable.load("r") == done
    finally:
        other.close()


def test_the_memory_store_holds_the_run_from_its_read_to_its_write() -> None:
    """The memory store's update holds its lock: no other thread's save can start
    between its read and its write."""
    store = MemoryStore()
    store.save(waiting())
    inside, go_on = threading.Event(), threading.Event()
    thread, outcome = _approval_stalled_inside(store, inside, go_on)
    try:
        free = store._lock.acquire(blocking=False)
        if free:
            store._lock.release()
        assert not free  # held by the approver's thread, from the read to the write
    finally:
        go_on.set()
        thread.join(30)
    assert outcome == [waiting().interruption]
    assert store.load("r").approvals == [APPROVED]
