"""Where run states are kept between steps (and between processes).

The interface is small on purpose: save a state, load one, list some, append
and read events. ``save`` is synchronous and atomic: a run's state is replaced
whole or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ._exceptions import RunNotFound
from ._serde import state_from_json, state_to_json
from ._state import RunState

__all__ = ["MemoryStore", "Store"]


class Store(Protocol):
    """Persistence for run states and their events."""

    def save(
        self, state: RunState, events: Sequence[dict[str, Any]] = (), *, owner: str | None = None
    ) -> None:
        """Replace the saved state of ``state.run_id`` and append ``events``, atomically.

        A store that keeps leases saves only if ``owner`` (when given) holds the
        lease on ``state.root_id``, checked in the same transaction, and raises
        :class:`~orchestra.LeaseLost` otherwise.
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
        self._states: dict[str, str] = {}
        self._events: list[dict[str, Any]] = []

    def save(
        self, state: RunState, events: Sequence[dict[str, Any]] = (), *, owner: str | None = None
    ) -> None:
        self._states[state.run_id] = state_to_json(state)
        self._events.extend(events)

    def load(self, run_id: str) -> RunState:
        try:
            return state_from_json(self._states[run_id])
        except KeyError:
            raise RunNotFound(f"no run {run_id!r} in this store") from None

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self._events
            if (run_id is None or e["run_id"] == run_id)
            and (root_id is None or e["root_id"] == root_id)
        ]
