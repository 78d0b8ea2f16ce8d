"""One stream of a followed tree's events, from its two sources (client side).

A client following a tree that workers execute gets each event up to twice:
live, in a worker's batch (with its run's depth; text deltas only this way),
and from the ``events`` table once the save that holds it has committed.
:class:`TreeMerge` makes one stream of them, each event once, each run's
events in their order:

- a live event is shown at once (the live batches of a run come from the one
  worker executing it, in order), unless its saved copy was shown already;
- a saved event already shown live is dropped (live events before it that
  were never saved belonged to a step that was lost: they stay shown);
- a saved event of a run seen live waits up to :data:`HOLD_S` for its live
  copy (longer once a live copy came too late: up to :data:`HOLD_MAX_S`), so
  that deltas still on their way are not shown after it; a run not seen live
  (the tree was followed after it started, or its worker published nothing)
  has its saved events shown at once;
- a text delta made before a saved event shown without its live copy (its
  batch was delayed past the hold, as on a loaded machine) is dropped: shown,
  it would fall outside its model call.

Depth: a live event carries its run's; a saved one gets its parent's plus one
(``depth_of`` asks the store for a run none of whose events came first).

Pure bookkeeping: no I/O, no clock (times are given).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._events import Event

__all__ = ["HOLD_S", "TreeMerge"]

HOLD_S = 0.5
"""How long a saved event waits for its live copy at first (then it is shown without)."""
HOLD_MAX_S = 2.0
"""The longest wait: each live batch bringing a copy whose saved one was shown
without it doubles the wait, up to this (live batches lag on a loaded machine)."""
_KEPT = 512
"""Events remembered per run for matching (the oldest are forgotten)."""


@attrs.define(eq=False)
class _Run:
    """One run's matching state."""

    ahead: deque[dict[str, Any]] = attrs.field(factory=lambda: deque(maxlen=_KEPT))
    """Shown live, not yet read from the table."""
    behind: deque[dict[str, Any]] = attrs.field(factory=lambda: deque(maxlen=_KEPT))
    """Shown from the table, not yet come live."""
    held: deque[tuple[float, dict[str, Any]]] = attrs.field(factory=deque)
    """Read from the table, waiting for their live copy (read at, record)."""
    gave_up: deque[dict[str, Any]] = attrs.field(factory=lambda: deque(maxlen=_KEPT))
    """Shown from the table after waiting in vain for their live copy."""
    live: bool = False
    """Whether any live event of the run came."""
    shown_up_to: float = float("-inf")
    """The latest ``at`` of the run's saved events shown without their live copy:
    a text delta made before it comes too late (a live batch delayed past
    :data:`HOLD_S`, on a loaded machine) and is dropped, not shown after it."""


def _find(queue: deque[Any], record: dict[str, Any], key: Callable[[Any], Any]) -> int:
    """The index of ``record`` in ``queue`` (-1: not there)."""
    return next((i for i, item in enumerate(queue) if key(item) == record), -1)


def _cut(queue: deque[dict[str, Any]], record: dict[str, Any]) -> bool:
    """Remove ``record`` and what is before it from ``queue``; whether it was there."""
    index = _find(queue, record, lambda item: item)
    for _ in range(index + 1):
        queue.popleft()
    return index >= 0


@attrs.define(eq=False)
class TreeMerge:
    """Merges a followed tree's live and saved events (see the module docstring)."""

    root_id: str
    depth_of: Callable[[str], int]
    """The depth of a run none of whose events (nor its parent's) came first."""
    _runs: dict[str, _Run] = attrs.field(factory=dict, init=False)
    _depths: dict[str, int] = attrs.field(factory=dict, init=False)
    _out: list[Event] = attrs.field(factory=list, init=False)
    root_stopped: bool = attrs.field(default=False, init=False)
    """Whether the root's ``run_stopped`` was shown."""
    hold_s: float = attrs.field(default=HOLD_S, init=False)
    """How long a saved event waits for its live copy now (see :data:`HOLD_MAX_S`)."""

    def live(self, entries: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """Events of one live batch, in order: ``(depth, record)``."""
        late = False
        for depth, record in entries:
            self._depths[record["run_id"]] = depth
            run = self._run(record["run_id"])
            run.live = True
            if record["type"] == "text_delta":
                if float(record["at"]) >= run.shown_up_to:  # else: late, see shown_up_to
                    self._show(record)
            elif (index := _find(run.held, record, lambda held: held[1])) >= 0:
                self._release(run, index)  # saved ones before it missed the live path
                run.held.popleft()
                self._show(record)
            elif _cut(run.behind, record):
                late = _cut(run.gave_up, record) or late  # it came, but too late
            else:
                self._show(record)
                run.ahead.append(record)
        if late:  # wait longer from now on (once per batch)
            self.hold_s = min(self.hold_s * 2, HOLD_MAX_S)

    def saved(self, records: Sequence[dict[str, Any]], now: float) -> None:
        """Events read from the table, in ``seq`` order, at ``now``."""
        for record in records:
            run = self._run(record["run_id"])
            if _cut(run.ahead, record):
                continue
            if run.live:
                run.held.append((now, record))
            else:
                self._shown_saved(run, record)

    def release(self, now: float) -> None:
        """Show the saved events that waited :data:`HOLD_S` for a live copy in vain."""
        for run in self._runs.values():
            due = sum(1 for read_at, _ in run.held if read_at + self.hold_s <= now)
            run.gave_up.extend(self._release(run, due))

    def next_due(self) -> float | None:
        """When the next held event is due (None: none is held)."""
        times = [run.held[0][0] + self.hold_s for run in self._runs.values() if run.held]
        return min(times, default=None)

    def take(self) -> list[Event]:
        """The events made ready since the last call, in order."""
        out, self._out = self._out, []
        return out

    def _release(self, run: _Run, count: int) -> list[dict[str, Any]]:
        """Show the first ``count`` held events without their live copy; them."""
        released = [run.held.popleft()[1] for _ in range(count)]
        for record in released:
            self._shown_saved(run, record)
        return released

    def _shown_saved(self, run: _Run, record: dict[str, Any]) -> None:
        """Show a saved event whose live copy has not come (it may yet: then dropped)."""
        self._show(record)
        run.behind.append(record)
        run.shown_up_to = max(run.shown_up_to, float(record["at"]))

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        return run

    def _show(self, record: dict[str, Any]) -> None:
        event = Event.from_record(record, self._depth(record))
        self._out.append(event)
        if event.type == "run_stopped" and event.run_id == self.root_id:
            self.root_stopped = True

    def _depth(self, record: dict[str, Any]) -> int:
        run_id, parent_id = record["run_id"], record.get("parent_id")
        depth = self._depths.get(run_id)
        if depth is None:
            if parent_id is None:
                depth = 0
            elif parent_id in self._depths:
                depth = self._depths[parent_id] + 1
            else:
                depth = self.depth_of(run_id)
            self._depths[run_id] = depth
        return depth
