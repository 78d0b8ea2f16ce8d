"""Fencing tokens: who may write a run, and since when.

Whoever executes a run holds a :class:`Fence`: a process holding the lease on
the run's tree (``scope="lease"``, keyed by the root run id), or a worker
holding the claim on one run (``scope="claim"``, keyed by the run id). Each
taking of a lease or a claim increases its *epoch*; the store keeps the
current epoch next to the holder (the lease row, the run row). Every fenced
write (a save, an event append, a ledger decision, the start of a write
tool, which is a save) checks the fence against the store in the same
transaction as the write and raises :class:`~orchestra.LeaseLost` when a
newer holder took over, however long the writer slept and whether or not it
noticed (Kleppmann's fencing tokens).
"""

from __future__ import annotations

from typing import Literal

import attrs

from .._exceptions import LeaseLost

__all__ = ["Fence", "check", "fence_lost"]


@attrs.frozen(kw_only=True)
class Fence:
    """The right to write, as the store granted it.

    Attributes:
        scope: ``"lease"`` (a tree's lease, ``key`` its root run id) or
            ``"claim"`` (a worker's claim on one run, ``key`` its run id).
        key: the root run id (lease) or the run id (claim).
        holder: the lease's owner or the claiming worker.
        epoch: the store's count of takings when this one was granted.
    """

    scope: Literal["lease", "claim"]
    key: str
    holder: str
    epoch: int

    def describe(self) -> str:
        """``lease on tree X`` / ``claim on run X``, for messages."""
        what = "lease on run tree" if self.scope == "lease" else "claim on run"
        return f"{what} {self.key!r}"


def fence_lost(fence: Fence, found: tuple[str | None, int] | None) -> LeaseLost:
    """The error of a write whose ``fence`` is no longer current (``found``: the
    holder and epoch the store has now, None if nobody holds it)."""
    if found is None or found[0] is None:
        now = "nobody holds it now"
    else:
        now = f"now held by {found[0]!r}, epoch {found[1]}"
    return LeaseLost(
        f"{fence.holder!r} lost the {fence.describe()} (its epoch {fence.epoch}; {now}); "
        "this process stopped without saving or starting anything more"
    )


def check(fence: Fence, found: tuple[str | None, int] | None) -> None:
    """Raise :func:`fence_lost` unless ``found`` is ``fence``'s holder and epoch."""
    if found is None or found != (fence.holder, fence.epoch):
        raise fence_lost(fence, found)
