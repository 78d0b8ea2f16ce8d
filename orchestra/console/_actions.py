"""What the console's buttons do to the store: the same as the CLI's commands.

Stop is ``orchestra cancel``: a cancel request in the store, which the
process running the tree applies within its watcher's poll (or, if that
process died, the stop recorded here). Approve, reject and grant are
``orchestra approve``/``reject``/``grant`` of what the page showed. Resume is checked here and
started as a process of its own (:mod:`orchestra.console._launches`).

Synchronous: the server calls these in a worker thread. Each raises an
:class:`~orchestra.OrchestraError` saying, in one line, why it cannot be done.
"""

from __future__ import annotations

from collections.abc import Callable

from .._approval import approve, grant, reject, stop_from_outside
from .._exceptions import StateError
from .._recipes.recipe import Recipe
from .._state import Status
from .._stores.contract import DurableStore
from .._top_ups import TopUp

__all__ = [
    "STOP_REASON",
    "approve_call",
    "check_resumable",
    "grant_more",
    "reject_call",
    "stop_tree",
]

STOP_REASON = "stopped from the console"


def stop_tree(store: DurableStore, root_id: str) -> None:
    """Cancel the whole running tree ``root_id``.

    Raises:
        StateError: the tree is not running.
    """
    stop_from_outside(store, root_id, STOP_REASON)


def approve_call(store: DurableStore, root_id: str, call_id: str) -> None:
    """Approve call ``call_id``, which the tree ``root_id`` waits on."""
    approve(store, root_id, call_id or None)


def reject_call(store: DurableStore, root_id: str, call_id: str, reason: str) -> None:
    """Reject call ``call_id`` of the tree ``root_id``; ``reason`` is what the model is told."""
    reject(store, root_id, call_id or None, reason)


def grant_more(
    store: DurableStore, root_id: str, usd: str, turns: str = "", tokens: str = ""
) -> None:
    """Grant the amounts of the form (its text; empty: none of that kind) to the
    request for more the tree ``root_id`` waits on.

    Raises:
        StateError: an amount is not a positive number, none is given, or the
            grant is refused.
    """
    more = TopUp(
        usd=_amount(usd, "USD", float, 1e6),
        turns=int(_amount(turns, "turns", int, 1e6)),
        tokens=int(_amount(tokens, "tokens", int, 1e12)),
    )
    if not (more.usd or more.turns or more.tokens):
        raise StateError("grant a positive amount of USD, turns or tokens")
    grant(store, root_id, more)


def _amount(text: str, kind: str, parse: Callable[[str], float], most: float) -> float:
    """The amount a form field says (0: empty)."""
    if not text.strip():
        return 0
    try:
        amount = parse(text)
    except ValueError:
        raise StateError(f"not an amount of {kind}: {text!r}") from None
    if not 0 < amount < most:  # NaN fails this too
        raise StateError(f"grant a positive amount of {kind}, not {text!r}")
    return float(amount)


def check_resumable(store: DurableStore, root_id: str) -> None:
    """Raise unless ``orchestra resume ROOT_ID`` can go on with the tree now.

    Raises:
        StateError: it is a child, it completed or failed, it stopped at a limit
            (raising one is for the command line), a process runs it, or it
            was not started by the CLI (nothing saved to rebuild its agent).
    """
    state = store.load(root_id)
    if state.parent_id is not None:
        raise StateError(f"run {root_id} is a child run; resume its tree from the root")
    if state.status is Status.RUNNING and store.lease_holder(root_id) is not None:
        raise StateError(f"run {root_id} is running in another process")
    if state.status in (Status.COMPLETED, Status.FAILED):
        raise StateError(f"run {root_id} ended {state.status.value}: there is nothing to resume")
    if state.status not in (Status.INTERRUPTED, Status.RUNNING):
        raise StateError(
            f"run {root_id} stopped at a limit ({state.status.value}); raise it to go on: "
            f"orchestra resume {root_id} --max-turns/--max-budget/--timeout ..."
        )
    Recipe.of(state)  # raises if the run cannot be rebuilt in another process
