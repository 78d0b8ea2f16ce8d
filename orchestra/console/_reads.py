"""What the console reads from the run store: one snapshot per page or update.

Synchronous (the store is SQLite): the server calls these in a worker thread.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._events import EventRecord
from .._exceptions import StateError
from .._recipes.recipe import Recipe
from .._result import RunResult
from .._state import RunState, Status, Usage
from .._stores.contract import DurableStore
from .._views.report import decisions, tree_result

__all__ = ["TreeSnapshot", "read_runs", "read_tree"]

EVENTS_SHOWN = 100
"""The most recent events a run page lists."""


@attrs.frozen(kw_only=True)
class TreeSnapshot:
    """A run tree as saved right now, and which of its runs the page looks at."""

    root: RunResult
    selected: RunState
    events: list[EventRecord]
    """The selected run's events (the whole tree's for the root), oldest first."""
    event_count: int
    """How many there are in all (only the last :data:`EVENTS_SHOWN` are kept)."""
    decisions: dict[str, list[dict[str, Any]]]
    """Each run's calls that waited for a human, and what was decided (by run id)."""
    lease: str | None
    """The process running the tree, if any."""
    directory: str | None
    """The sandbox of a run started by the CLI."""
    spent: dict[str, Usage]
    """Each run's tree usage, added up from the store (see :func:`rolled_up`)."""
    live: dict[str, str] = attrs.Factory(dict)
    """What each running run is streaming now, by run id (as its process last noted)."""

    @property
    def root_state(self) -> RunState:
        return self.root.state

    def waiting(self) -> dict[str, Any] | None:
        """The human decision the tree stopped for, with what was decided so far
        (``decision`` is ``waiting`` until someone approves or rejects), or None."""
        root = self.root_state
        asked = root.interruption
        if root.status is not Status.INTERRUPTED or asked is None or not asked.kind.waits_for_human:
            return None
        holder = asked.run_id or root.run_id
        found = (d for d in self.decisions.get(holder, []) if d["call_id"] == asked.call_id)
        return next(({**d, "run_id": holder} for d in found), None)


def read_runs(store: DurableStore, *, limit: int, roots_only: bool) -> list[RunState]:
    """The most recently updated runs (roots only unless asked); a running root's tree
    usage added up from its runs (see :func:`rolled_up`)."""
    states = store.list_runs(limit=limit, roots_only=roots_only)
    return [_live_total(store, s) if _running_root(s) else s for s in states]


def _running_root(state: RunState) -> bool:
    return state.parent_id is None and state.status is Status.RUNNING


def _live_total(store: DurableStore, root: RunState) -> RunState:
    tree = rolled_up(tree_result(store.tree(root.run_id), root.run_id))[root.run_id]
    return attrs.evolve(root, tree=tree)


def read_tree(store: DurableStore, run_id: str) -> TreeSnapshot:
    """The tree of run ``run_id`` (a prefix is enough), looking at that run.

    Raises:
        RunNotFound: no such run.
    """
    selected_id = store.resolve(run_id)
    root_id = store.load(selected_id).root_id
    states = store.tree(root_id)
    selected = next(s for s in states if s.run_id == selected_id)
    events = store.events(root_id=root_id)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_run.setdefault(event["run_id"], []).append(event)
    shown = events if selected.parent_id is None else by_run.get(selected.run_id, [])
    root = tree_result(states, root_id)
    return TreeSnapshot(
        root=root,
        selected=selected,
        events=shown[-EVENTS_SHOWN:],
        event_count=len(shown),
        decisions={s.run_id: decisions(s, by_run.get(s.run_id, [])) for s in states},
        lease=store.lease_holder(root_id),
        directory=_directory(root.state),
        spent=rolled_up(root),
        live=store.stream_notes.streaming_texts(root_id),
    )


def rolled_up(result: RunResult) -> dict[str, Usage]:
    """Each run's tree usage (by run id) as the sum of its own and its descendants' own.

    That is what its saved tree usage is once it saves again: while its
    children run, each saves its own spend as it goes, but a parent saves its
    tree total only at its own next step.
    """
    totals: dict[str, Usage] = {}

    def walk(node: RunResult) -> Usage:
        total = sum((walk(child) for child in node.children), node.state.own)
        totals[node.run_id] = total
        return total

    walk(result)
    return totals


def _directory(state: RunState) -> str | None:
    if not state.metadata:
        return None
    try:
        return Recipe.of(state).directory
    except StateError:
        return None
