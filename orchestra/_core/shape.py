"""Limits on a tree's shape: how deep it goes, how many children a run starts,
how many runs a tree holds, how many children run at once.

``Limits.max_depth``, ``max_children``, ``max_descendants`` and
``max_concurrent_children`` (see :class:`~orchestra.Limits`). A call that
would start a child over one of them is told so in words (its tool result)
and the run goes on; a child over the concurrency cap waits for a slot (on
workers its parent's call parks until the running children have ended).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import attrs
import trio

from .._state import Limits
from .run import LiveRun

__all__ = ["depth_refusal", "inherit", "room", "running_slot"]


def inherit(parent: LiveRun, ask: Limits) -> Limits:
    """A child's shape limits: one level fewer than its parent's depth, the same
    bounds on its children, unless it asks for less (``max_descendants`` is
    checked on every ancestor instead of being copied); and what its limits do
    when reached (``on_limit``), as its parent's unless it says."""
    own = parent.state.limits
    depth = None if own.max_depth is None else max(own.max_depth - 1, 0)
    return attrs.evolve(
        ask,
        max_depth=_least(depth, ask.max_depth),
        max_children=_least(own.max_children, ask.max_children),
        max_concurrent_children=_least(own.max_concurrent_children, ask.max_concurrent_children),
        on_limit=ask.on_limit or own.on_limit,
    )


def depth_refusal(parent: LiveRun) -> str | None:
    """Why ``parent`` may not start a child for the depth limit of it or an ancestor."""
    for level, node in enumerate(parent.lineage(), start=1):
        cap = node.state.limits.max_depth
        if cap is not None and level > cap:
            whose = "this run" if node is parent else f"its ancestor run {node.state.run_id}"
            levels = "no level" if cap == 0 else f"{cap} level{'s' if cap > 1 else ''}"
            return f"the tree's depth limit: {whose} allows {levels} of runs below it"
    return None


def room(parent: LiveRun) -> tuple[int, str] | None:
    """How many more children ``parent`` may start, and the limit that says so
    (None: no bound)."""
    least: tuple[int, str] | None = None
    cap = parent.state.limits.max_children
    if cap is not None:
        least = (cap - parent.state.own.child_runs, f"this run may start at most {cap} children")
    for node in parent.lineage():
        cap = node.state.limits.max_descendants
        if cap is None:
            continue
        left = cap - node.state.tree.child_runs
        if least is None or left < least[0]:
            whose = "this run's tree" if node is parent else f"the tree of run {node.state.run_id}"
            least = (left, f"{whose} may hold at most {cap} runs below it")
    return least


@contextlib.asynccontextmanager
async def running_slot(parent: LiveRun) -> AsyncIterator[None]:
    """Hold one of ``parent``'s ``max_concurrent_children`` slots for the block
    (none needed if unbounded). Cancellation: waiting for a slot is a checkpoint."""
    cap = parent.state.limits.max_concurrent_children
    if cap is None:
        yield
        return
    if parent.child_slots is None:
        parent.child_slots = trio.Semaphore(cap)
    async with parent.child_slots:
        yield


def _least(parents: int | None, asked: int | None) -> int | None:
    if parents is None:
        return asked
    return parents if asked is None else min(parents, asked)
