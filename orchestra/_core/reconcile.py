"""Writes in doubt settled by asking the world: a tool's reconcile hook.

A write whose call started in an earlier process and left no result may or
may not have taken effect. Without a hook the run stops for a human
(``unknown_outcome``). With one (``Tool(reconcile=...)``), the run asks it
first, passing the call's arguments and idempotency key: *done* records the
result it gives (the write is not run again), *not done* runs the write again
(once: it is marked started anew, fenced as any call), *unknown*, a hook that
fails or runs past the tool's time limit stop the run for a human as before,
saying what the hook said. Every answer is a ``tool_reconciled`` event.

Cancellation: the hook runs in the run's scope, under the tool's time limit;
a cancel stops it (nothing is recorded: the call stays in doubt).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import trio

from .._redact import redact
from .._storable import valid_text
from .._tools import Reconciled, Tool
from .run import LiveRun

__all__ = ["ask_world", "settled_text"]


async def ask_world(
    run: LiveRun, tool: Tool, call_id: str, arguments: Mapping[str, Any], key: str, limit: float
) -> Reconciled:
    """What ``tool``'s reconcile hook says of call ``call_id`` (its failure, a time
    out or an answer of the wrong kind: unknown, saying so); said as an event."""
    assert tool.reconcile is not None
    answer: object = Reconciled.unknown(f"the reconcile hook gave no answer within {limit:g} s")
    try:
        with trio.move_on_after(limit):
            answer = tool.reconcile(arguments, key)
            if inspect.isawaitable(answer):
                answer = await answer
    except Exception as exc:  # the hook's own failure: nobody can tell, a human decides
        answer = Reconciled.unknown(f"the reconcile hook failed: {exc!r}")
    if not isinstance(answer, Reconciled):
        answer = Reconciled.unknown(f"the reconcile hook returned {type(answer).__name__}")
    said = redact(valid_text(answer.said))
    run.emit(
        "tool_reconciled", tool=tool.name, call_id=call_id, outcome=answer.outcome, said=said[:200]
    )
    return Reconciled(answer.outcome, said)


def settled_text(tool: str, answer: Reconciled) -> str:
    """The result a call settled as done gets, with a note of how it was settled."""
    return (
        f"{answer.said}\n[Orchestra: this call was cut short before its result was saved; "
        f"{tool}'s reconcile check found it had taken effect, so it was not run again.]"
    )
