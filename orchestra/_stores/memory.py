"""Run states kept in this process's memory: :class:`MemoryStore`.

It fulfils :class:`~orchestra._stores.contract.Store` (re-exported here) and
offers neither cancel requests nor leases: nothing outside the process can
reach it. Transcripts are appended rather than rewritten (see
:mod:`orchestra._stores.transcripts`), so a save costs what the step added.
Threads may share it: a lock serialises its writes and reads, so
:meth:`MemoryStore.update` is one step no other save interleaves with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from .._events import EventRecord
from .._exceptions import ConfigError, RunNotFound
from .._state import RunState
from . import fence as fences
from . import shared
from .contract import CancelInbox, Leases, Store, StreamNotes
from .fence import Fence
from .transcripts import SavedTranscripts, joined, store_rows

__all__ = ["MemoryStore", "Store"]


class MemoryStore:
    """A store in this process's memory (states are copied through JSON; no leases,
    no cancel requests: ``inbox`` and ``leases`` are None). Fences are refused:
    it grants none."""

    def __init__(self) -> None:
        self._heads: dict[str, str] = {}
        self._transcripts: dict[str, list[str]] = {}
        self._saved = SavedTranscripts()
        self._events: list[EventRecord] = []
        self._lock = threading.RLock()  # reentrant: update saves while holding it

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``copy.deepcopy``, pickling) takes the runs, not the lock."""
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @property
    def inbox(self) -> CancelInbox | None:
        return None

    @property
    def leases(self) -> Leases | None:
        return None

    @property
    def stream_notes(self) -> StreamNotes | None:
        return None  # nobody outside this process reads it: RunHandle.events() serves it

    def close(self) -> None:
        """Nothing to let go of."""

    def save(
        self, state: RunState, events: Sequence[EventRecord] = (), *, fence: Fence | None = None
    ) -> None:
        self.save_many([state], events, fence=fence)

    def save_many(
        self,
        states: Sequence[RunState],
        events: Sequence[EventRecord] = (),
        *,
        fence: Fence | None = None,
    ) -> None:
        """Save several states and ``events`` (all or none).

        Raises:
            LeaseLost: a fence was given (this store grants none).
            StateError: a state cannot be stored as JSON.
        """
        if fence is not None:
            raise fences.fence_lost(fence, None)
        with self._lock:
            writes = [(state, store_rows(self._saved, state)) for state in states]  # encoded first
            for state, (row, start, messages) in writes:
                transcript = self._transcripts.setdefault(state.run_id, [])
                del transcript[start:]
                transcript.extend(data for _, _, data in messages)
                self._heads[state.run_id] = row[7]  # the head, as the SQL stores keep it
                self._saved.written(state)
            self._events.extend(events)

    def update(self, run_id: str, change: Callable[[RunState], RunState | None]) -> RunState:
        """Save ``change``'s version of the saved state of ``run_id`` (None: nothing
        is written; what it raises writes nothing), holding the store's lock
        throughout: no other thread's save comes between the read and the write.

        Raises:
            RunNotFound: no run with this id.
        """
        with self._lock:
            state = self.load(run_id)
            changed = change(state)
            if changed is None:
                return state
            self.save(changed)
            return changed

    def load(self, run_id: str) -> RunState:
        with self._lock:
            try:
                head = self._heads[run_id]
            except KeyError:
                raise RunNotFound(f"no run {run_id!r} in this store") from None
            transcript = list(self._transcripts[run_id])
        return joined(head, [orjson.loads(m) for m in transcript])

    def _run_ids(self) -> list[str]:
        """The ids of the runs saved, as of now."""
        with self._lock:
            return list(self._heads)

    def tree(self, root_id: str) -> list[RunState]:
        """Every run of the tree rooted at ``root_id``: the root, then by creation time.

        Raises:
            RunNotFound: no run belongs to this tree.
        """
        states = [self.load(run_id) for run_id in self._run_ids()]
        found = sorted(
            (s for s in states if s.root_id == root_id),
            key=lambda s: (s.run_id != s.root_id, s.created_at, s.run_id),
        )
        if not found:
            raise RunNotFound(f"no run tree {root_id!r} in this store")
        return found

    def list_runs(self, *, limit: int = 50, roots_only: bool = True) -> list[RunState]:
        """Up to ``limit`` runs, most recently updated first (only roots by default)."""
        shared.check_limit(limit)
        states = [self.load(run_id) for run_id in self._run_ids()]
        chosen = [s for s in states if not roots_only or s.run_id == s.root_id]
        chosen.sort(key=lambda s: (-s.updated_at, s.run_id))
        return chosen[:limit]

    def resolve(self, prefix: str) -> str:
        """The run id that ``prefix`` starts (an exact id always wins).

        Raises:
            ConfigError: the prefix is empty.
            RunNotFound: no run id starts with it.
            StateError: several do.
        """
        if not prefix:
            raise ConfigError("a run id prefix must not be empty")
        ids = sorted(run_id for run_id in self._run_ids() if run_id.startswith(prefix))
        return shared.pick_run_id(prefix, ids[:6], "this store")

    def add_events(self, events: Iterable[EventRecord], *, fence: Fence | None = None) -> None:
        """Append events (each needs ``run_id``, ``root_id``, ``type``, ``at``).

        Raises:
            LeaseLost: a fence was given (this store grants none).
            StateError: an event lacks a key or is not JSON-serialisable (checked as
                the SQL stores check it).
        """
        if fence is not None:
            raise fences.fence_lost(fence, None)
        added = list(events)
        for event in added:
            shared.event_row(event)
        self._events.extend(added)

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[EventRecord]:
        return [
            e
            for e in self._events
            if (run_id is None or e["run_id"] == run_id)
            and (root_id is None or e["root_id"] == root_id)
        ]
