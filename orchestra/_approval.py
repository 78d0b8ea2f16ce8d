"""Human decisions taken in the store: approve or reject a waiting call, stop
a tree that no process runs.

A run waiting for a human is ``interrupted`` with an ``approval`` (or
``unknown_outcome``) interruption naming the call, its exact arguments and the
run that holds it (a descendant's id when the call surfaced from a child), or
with a ``budget_request`` (a limit that asks: :func:`grant` answers it).
Deciding writes into that run's saved state; :meth:`Runner.resume` of the
root then continues on the ordinary path: an approved call runs (only with
the arguments that were approved), a rejected one gets a tool result in
words, never an empty one.

A cancel asked of a tree whose process died (``orchestra cancel``) cannot be
applied by anyone: :func:`cancel_unowned` takes the tree's lease and records
the stop itself, so no request is left armed to stop a later resume.
"""

from __future__ import annotations

import functools
import time

from ._exceptions import StateError
from ._state import Approval, Interruption, InterruptionKind, RunState, Status
from ._stores.contract import DurableStore, Store
from ._stores.shared import process_owner
from ._top_ups import TopUp, grant_into, shortfall

__all__ = ["approve", "cancel_unowned", "grant", "reject", "stop_from_outside", "waiting_call"]


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
    """Approve the waiting call (bound to its id and its exact arguments).

    Compare-and-swap: the run holding the call is checked and changed in one
    transaction of the store; it must still wait on the very question read
    here (same kind, call and arguments). Approving a call already approved
    writes nothing.

    Raises:
        StateError: the run waits for no approval (any more: it went on, or
            finished, or now asks something else), or the call was rejected
            already (a decision is never silently replaced).
    """
    if waiting_call(store, run_id, call_id).kind is InterruptionKind.BUDGET_REQUEST:
        raise StateError(
            f"run {run_id} asks for more budget, not for an approval: grant it "
            "(orchestra grant RUN_ID --usd X, Runner.grant) or reject it"
        )
    return _decide(store, run_id, call_id, "approve", "")


def grant(store: Store, run_id: str, top_up: TopUp, *, now: float | None = None) -> Interruption:
    """Grant the budget request ``run_id``'s tree waits on: raise the asking
    run's limits by ``top_up`` (it goes on when the tree is resumed).

    A grant to a child must fit in what each of its ancestors' budgets has
    left (a root's comes from the person who grants). Compare-and-swap: the
    asking run is checked and changed in one transaction; it must still wait
    on the very request read here. The same grant again writes nothing (two
    concurrent grants apply once); another one for the same request is refused.

    Raises:
        StateError: the tree waits for no budget request (any more), the
            request was decided already otherwise, or an ancestor has not
            enough left (nothing is written).
    """
    waiting = waiting_call(store, run_id)
    if waiting.kind is not InterruptionKind.BUDGET_REQUEST:
        raise StateError(
            f"run {run_id} waits for a decision on call {waiting.call_id} "
            f"({waiting.kind.value}), not for more budget: approve or reject it"
        )
    asking = waiting.run_id or run_id
    short = shortfall(_ancestors(store, store.load(asking)), top_up)
    if short is not None:
        raise StateError(f"not granted: {short}")
    assert waiting.call_id is not None
    decision = Approval(call_id=waiting.call_id, arguments=top_up.as_arguments())
    at = time.time() if now is None else now
    store.update(asking, functools.partial(_granted, waiting, decision, top_up, at))
    return waiting


def _granted(
    seen: Interruption, decision: Approval, top_up: TopUp, at: float, holder: RunState
) -> RunState | None:
    """``holder`` with ``top_up`` granted, or None if this grant is recorded already."""
    if decision in holder.approvals:
        return None  # the same grant again writes nothing
    _refuse_second_decision(holder, decision.call_id, "approve", "")
    if any(a.call_id == decision.call_id for a in holder.approvals):
        raise StateError(
            f"request {decision.call_id} of run {holder.run_id} was already granted "
            "otherwise; a decision is not replaced"
        )
    _refuse_another_question(holder, seen)
    holder.approvals.append(decision)
    grant_into(holder, top_up, f"granted {top_up.describe()}", at)
    return holder


def _ancestors(store: Store, state: RunState) -> list[RunState]:
    found: list[RunState] = []
    while state.parent_id is not None:
        state = store.load(state.parent_id)
        found.append(state)
    return found


def reject(store: Store, run_id: str, call_id: str | None = None, reason: str = "") -> Interruption:
    """Reject the waiting call; ``reason`` becomes its tool result (a default if empty).

    Compare-and-swap, as :func:`approve`. Rejecting a call already rejected
    for the same reason writes nothing.

    Raises:
        StateError: the run waits for no decision (any more), or the call was
            approved already, or rejected for another reason.
    """
    return _decide(store, run_id, call_id, "reject", reason.strip())


def _decide(
    store: Store, run_id: str, call_id: str | None, decision: str, reason: str
) -> Interruption:
    """Record ``decision`` on the call ``run_id``'s tree waits on; that interruption."""
    waiting = waiting_call(store, run_id, call_id)
    assert waiting.call_id is not None
    approval = Approval(call_id=waiting.call_id, arguments=waiting.arguments or {})
    decide = functools.partial(_decided, waiting, approval, decision, reason)
    store.update(waiting.run_id or run_id, decide)
    return waiting


def _decided(
    seen: Interruption, approval: Approval, decision: str, reason: str, holder: RunState
) -> RunState | None:
    """``holder`` with the decision recorded, or None if it is recorded already.

    Approvals of the call for other arguments (they approve nothing) are dropped.

    Raises:
        StateError: the decision would replace another, or ``holder`` no longer
            waits on the question ``seen`` asked (nothing is written).
    """
    holder.approvals = [
        a for a in holder.approvals if a.call_id != approval.call_id or a == approval
    ]
    _refuse_second_decision(holder, approval.call_id, decision, reason)
    if decision == "approve" and approval in holder.approvals:
        return None  # a repeated decision writes nothing
    if decision == "reject" and holder.rejections.get(approval.call_id) == reason:
        return None
    _refuse_another_question(holder, seen)
    if decision == "approve":
        holder.approvals.append(approval)
    else:
        holder.rejections[approval.call_id] = reason
    return holder


def _refuse_another_question(holder: RunState, seen: Interruption) -> None:
    """Raise unless ``holder`` still waits for a human on the question ``seen`` asked.

    Raises:
        StateError: naming what the run does now.
    """
    now = holder.interruption
    if (
        holder.status is Status.INTERRUPTED
        and now is not None
        and now.kind is seen.kind
        and now.call_id == seen.call_id
        and now.arguments == seen.arguments
    ):
        return
    doing = holder.status.value
    if holder.status is Status.INTERRUPTED and now is not None:
        doing = f"interrupted ({now.kind.value}, call {now.call_id})"
    raise StateError(
        f"run {holder.run_id} is {doing} now, no longer waiting for a decision on call "
        f"{seen.call_id} ({seen.kind.value}); nothing was written"
    )


def _refuse_second_decision(holder: RunState, call_id: str, decision: str, reason: str) -> None:
    """Raise if ``call_id`` was already decided otherwise than ``decision`` (with ``reason``).

    Raises:
        StateError: naming the decision already taken.
    """
    where = f"call {call_id} in run {holder.run_id}"
    if any(a.call_id == call_id for a in holder.approvals):
        if decision != "approve":
            raise StateError(f"{where} was already approved; a decision is not replaced")
    elif call_id in holder.rejections:
        taken = holder.rejections[call_id]
        said = f"rejected ({taken!r})" if taken else "rejected"
        if decision != "reject":
            raise StateError(f"{where} was already {said}; a decision is not replaced")
        if taken != reason:
            raise StateError(f"{where} was already {said}; it is not rejected again otherwise")


def stop_from_outside(store: DurableStore, run_id: str, reason: str) -> list[str] | None:
    """Stop the running run ``run_id`` (and its descendants) from another process.

    If a process holds its tree, a cancel request in the store, which that
    process applies at its watcher's next poll: returns None (the caller may
    wait for the stop). If none does (its process died), the runs are stopped
    here (:func:`cancel_unowned`): returns their ids.

    Raises:
        StateError: the run is not running.
    """
    state = store.load(run_id)
    if state.status is not Status.RUNNING:
        raise StateError(f"run {run_id} is not running: it ended {state.status.value}")
    if store.lease_holder(state.root_id) is not None:
        store.request_cancel(run_id, reason)
        return None
    return cancel_unowned(store, run_id, reason, process_owner())


def cancel_unowned(store: DurableStore, run_id: str, reason: str, owner: str) -> list[str]:
    """Stop ``run_id`` and its running descendants in the store, as ``owner``.

    For a tree no live process holds (its process died): every run of the
    subtree still ``running`` becomes ``interrupted`` (cancelled, ``reason``),
    keeping its spend, and can be resumed later. The tree's lease is held
    while doing so, so a process that wakes up cannot save over it.

    Returns the ids of the runs stopped.

    Raises:
        LeaseError: a process holds the tree after all.
    """
    root_id = store.load(run_id).root_id
    fence = store.acquire_lease(root_id, owner)
    try:
        stopped = [s for s in _subtree(store.tree(root_id), run_id) if not s.status.terminal]
        for state in stopped:
            _stop(state, reason)
            store.save(state, fence=fence)
        store.clear_cancels(root_id)
    finally:
        store.release_lease(root_id, owner)
    return [s.run_id for s in stopped]


def _subtree(states: list[RunState], run_id: str) -> list[RunState]:
    inside, found = {run_id}, True
    while found:
        found = False
        for state in states:
            if state.parent_id in inside and state.run_id not in inside:
                inside.add(state.run_id)
                found = True
    return [s for s in states if s.run_id in inside]


def _stop(state: RunState, reason: str) -> None:
    state.status, state.reason = Status.INTERRUPTED, reason
    state.interruption = Interruption(kind=InterruptionKind.CANCELLED, reason=reason)
