"""Human decisions on a waiting call: approve it or reject it, in the store.

A run waiting for a human is ``interrupted`` with an ``approval`` (or
``unknown_outcome``) interruption naming the call, its exact arguments and the
run that holds it (a descendant's id when the call surfaced from a child).
Deciding writes into that run's saved state; :meth:`Runner.resume` of the
root then continues on the ordinary path: an approved call runs (only with
the arguments that were approved), a rejected one gets a tool result in
words, never an empty one.
"""

from __future__ import annotations

from ._exceptions import StateError
from ._state import Approval, Interruption, Status
from ._store import Store

__all__ = ["approve", "reject", "waiting_call"]


def waiting_call(store: Store, run_id: str, call_id: str | None = None) -> Interruption:
    """The call run ``run_id`` (or its tree) waits on.

    Raises:
        StateError: the run is not waiting for a human, or for another call.
    """
    state = store.load(run_id)
    waiting = state.interruption
    if (
        state.status is not Status.INTERRUPTED
        or waiting is None
        or not waiting.kind.waits_for_human
    ):
        raise StateError(f"run {run_id} is {state.status.value} and waits for no approval")
    if call_id is not None and call_id != waiting.call_id:
        raise StateError(f"run {run_id} waits on call {waiting.call_id}, not {call_id}")
    return waiting


def approve(store: Store, run_id: str, call_id: str | None = None) -> Interruption:
    """Approve the waiting call (bound to its id and its exact arguments)."""
    waiting = waiting_call(store, run_id, call_id)
    holder = store.load(waiting.run_id or run_id)
    assert waiting.call_id is not None
    holder.approvals.append(Approval(call_id=waiting.call_id, arguments=waiting.arguments or {}))
    holder.rejections.pop(waiting.call_id, None)
    store.save(holder)
    return waiting


def reject(store: Store, run_id: str, call_id: str | None = None, reason: str = "") -> Interruption:
    """Reject the waiting call; ``reason`` becomes its tool result (a default if empty)."""
    waiting = waiting_call(store, run_id, call_id)
    holder = store.load(waiting.run_id or run_id)
    assert waiting.call_id is not None
    holder.rejections[waiting.call_id] = reason.strip()
    holder.approvals = [a for a in holder.approvals if a.call_id != waiting.call_id]
    store.save(holder)
    return waiting
