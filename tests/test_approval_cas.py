"""Human decisions are compare-and-swap, on every store (memory, SQLite, PostgreSQL).

An approver that read a run waiting for a human, then stalled, must not
write its decision over what happened since: not turn a finished run back,
not approve a question the run no longer asks (a write that started after a
first approval and was left in doubt). A repeated decision writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestra import MemoryStore, SQLiteStore, StateError
from orchestra._approval import approve, reject
from orchestra._state import Approval, Interruption, InterruptionKind, RunState, Status
from orchestra._stores.contract import Store

ARGS = {"path": "access.log"}


def waiting(kind: InterruptionKind = InterruptionKind.APPROVAL) -> RunState:
    """A run stopped for a human on call c1 (delete_file access.log)."""
    return RunState(
        run_id="r",
        root_id="r",
        agent="a",
        model="m",
        status=Status.INTERRUPTED,
        messages=[{"role": "user", "content": "free some space"}],
        interruption=Interruption(
            kind=kind,
            reason="delete_file needs approval",
            run_id="r",
            call_id="c1",
            tool="delete_file",
            arguments=ARGS,
        ),
    )


def other_writer(store: Store, tmp_path: Path) -> Store:
    """Another process's handle on the same store (the same object in memory)."""
    if isinstance(store, MemoryStore):
        return store
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    from orchestra.distributed import PostgresStore

    return PostgresStore(str(store.path))


class Writes:
    """Counts the decisions ``store.update`` wrote (a ``change`` that returned a state)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = store.update

        def update(run_id: str, change: Callable[[RunState], RunState | None]) -> RunState:
            def counted(state: RunState) -> RunState | None:
                changed = change(state)
                self.count += changed is not None
                return changed

            return real(run_id, counted)

        monkeypatch.setattr(store, "update", update)


def test_a_repeated_decision_writes_nothing(
    each_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    each_store.save(waiting())
    writes = Writes(each_store, monkeypatch)
    approve(each_store, "r")
    approve(each_store, "r", "c1")
    assert writes.count == 1
    assert each_store.load("r").approvals == [Approval(call_id="c1", arguments=ARGS)]
    with pytest.raises(StateError, match="already approved"):
        reject(each_store, "r", reason="no")
    assert writes.count == 1


def test_a_repeated_rejection_writes_nothing(
    each_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    each_store.save(waiting())
    writes = Writes(each_store, monkeypatch)
    reject(each_store, "r", reason="keep it")
    reject(each_store, "r", reason=" keep it ")
    assert writes.count == 1
    with pytest.raises(StateError, match="rejected"):
        reject(each_store, "r", reason="another reason")
    with pytest.raises(StateError, match="rejected"):
        approve(each_store, "r")
    assert each_store.load("r").rejections == {"c1": "keep it"}


class _Stalling:
    """``store`` as an approver sees it that stalls after its read (``waiting_call``)
    and before its write (``update``), until ``go_on`` is set."""

    def __init__(self, store: Store, read: threading.Event, go_on: threading.Event) -> None:
        self._store, self._read, self._go_on = store, read, go_on

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def update(self, run_id: str, change: Callable[[RunState], RunState | None]) -> RunState:
        self._read.set()
        self._go_on.wait(30)
        return self._store.update(run_id, change)


def _stalled_approval(store: Store) -> tuple[threading.Thread, threading.Event, list[Any]]:
    """An approver of run r that read it (it waits on c1) and stalls before its
    write; it goes on when the event is set. Its outcome lands in the list."""
    read, go_on = threading.Event(), threading.Event()
    outcome: list[Any] = []
    stalling = _Stalling(store, read, go_on)

    def approver() -> None:
        try:
            outcome.append(approve(stalling, "r"))  # type: ignore[arg-type]
        except StateError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=approver)
    thread.start()
    assert read.wait(30)
    return thread, go_on, outcome


def test_a_late_approval_never_turns_a_finished_run_back(each_store: Store, tmp_path: Path) -> None:
    each_store.save(waiting())
    late = other_writer(each_store, tmp_path)
    try:
        thread, go_on, outcome = _stalled_approval(late)
        approve(each_store, "r")  # another approver was quicker; the run resumed...
        done = each_store.load("r")
        done.status, done.interruption, done.reason = Status.COMPLETED, None, "answered"
        done.approvals = []  # spent when the write started
        done.results["c1"] = "Deleted access.log."
        each_store.save(done)  # ...and finished
        go_on.set()
        thread.join(30)
    finally:
        if late is not each_store:
            late.close()
    assert len(outcome) == 1 and isinstance(outcome[0], StateError), outcome
    assert "completed now" in str(outcome[0]) and "nothing was written" in str(outcome[0])
    saved = each_store.load("r")
    assert saved.status is Status.COMPLETED and saved.approvals == []


def test_a_late_approval_does_not_answer_the_question_a_crash_asked_since(
    each_store: Store, tmp_path: Path
) -> None:
    """Approved, the write started and the process died: the run now asks whether
    the write happened (unknown_outcome). A stale approval of the first question
    must not approve running it again."""
    each_store.save(waiting())
    late = other_writer(each_store, tmp_path)
    try:
        thread, go_on, outcome = _stalled_approval(late)
        each_store.save(waiting(InterruptionKind.UNKNOWN_OUTCOME))
        go_on.set()
        thread.join(30)
    finally:
        if late is not each_store:
            late.close()
    assert len(outcome) == 1 and isinstance(outcome[0], StateError), outcome
    assert "unknown_outcome" in str(outcome[0])
    assert each_store.load("r").approvals == []


def test_a_decision_on_a_finished_run_is_refused(each_store: Store) -> None:
    done = waiting()
    done.status, done.interruption = Status.COMPLETED, None
    each_store.save(done)
    with pytest.raises(StateError, match="waits for no approval"):
        approve(each_store, "r")
    assert each_store.load("r") == done
