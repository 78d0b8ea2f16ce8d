"""Where run states are kept between steps (and between processes).

The interface is small on purpose: save a state, load one, list some, append
and read events. ``save`` is synchronous and atomic: a run's state is replaced
whole or not at all. Stores append transcripts rather than rewrite them (see
:mod:`orchestra._stores.transcripts`), so a save costs what the step added.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from .._exceptions import RunNotFound
from .._state import RunState
from .fence import Fence
from .transcripts import SavedTranscripts, head_json, joined, message_json

__all__ = ["MemoryStore", "Store"]


class Store(Protocol):
    """Persistence for run states and their events."""

    def save(
        self, state: RunState, events: Sequence[dict[str, Any]] = (), *, fence: Fence | None = None
    ) -> None:
        """Replace the saved state of ``state.run_id`` and append ``events``, atomically.

        With ``fence`` (a lease or a claim the store granted), the save happens
        only if that fence is still current, checked in the same transaction,
        and raises :class:`~orchestra.LeaseLost` otherwise.
        """
        ...

    def load(self, run_id: str) -> RunState:
        """The last saved state. Raises :class:`RunNotFound`."""
        ...

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[dict[str, Any]]:
        """Events in the order they were added, for one run or one tree (or all)."""
        ...


class MemoryStore:
    """A store in this process's memory (states are copied through JSON; no leases)."""

    def __init__(self) -> None:
        self._heads: dict[str, str] = {}
        self._transcripts: dict[str, list[str]] = {}
        self._saved = SavedTranscripts()
        self._events: list[dict[str, Any]] = []

    def save(
        self, state: RunState, events: Sequence[dict[str, Any]] = (), *, fence: Fence | None = None
    ) -> None:
        self.save_many([state], events, fence=fence)

    def save_many(
        self,
        states: Sequence[RunState],
        events: Sequence[dict[str, Any]] = (),
        *,
        fence: Fence | None = None,
    ) -> None:
        """Save several states and ``events`` (all or none)."""
        writes = [(state, *self._saved.unsaved(state)) for state in states]
        encoded = [
            (head_json(s), start, [message_json(m) for m in new]) for s, start, new in writes
        ]
        for (state, _, _), (head, start, messages) in zip(writes, encoded, strict=True):
            transcript = self._transcripts.setdefault(state.run_id, [])
            del transcript[start:]
            transcript.extend(messages)
            self._heads[state.run_id] = head
            self._saved.written(state)
        self._events.extend(events)

    def load(self, run_id: str) -> RunState:
        try:
            head = self._heads[run_id]
        except KeyError:
            raise RunNotFound(f"no run {run_id!r} in this store") from None
        return joined(head, [orjson.loads(m) for m in self._transcripts[run_id]])

    def tree(self, root_id: str) -> list[RunState]:
        """Every run of the tree rooted at ``root_id``: the root, then by creation time.

        Raises:
            RunNotFound: no run belongs to this tree.
        """
        states = [self.load(run_id) for run_id in self._heads]
        found = sorted(
            (s for s in states if s.root_id == root_id),
            key=lambda s: (s.run_id != s.root_id, s.created_at, s.run_id),
        )
        if not found:
            raise RunNotFound(f"no run tree {root_id!r} in this store")
        return found

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self._events
            if (run_id is None or e["run_id"] == run_id)
            and (root_id is None or e["root_id"] == root_id)
        ]
