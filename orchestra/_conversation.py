"""Conversations: a finished or stopped run continued with a new user message.

``Runner.run(agent, message, continue_from=RUN_ID)`` starts a *new* root run
whose transcript is the earlier run's followed by ``message``; it records
the run it continues (``continues``) and the conversation's first run
(``conversation_id``). The earlier run is left as it was: a conversation is a
chain of runs, each saved, shown and resumable on its own.

Limits count **per message**: each continuation gets the limits it is given
(the agent's by default) afresh, as a new question would. What a whole
conversation spent is the sum of its runs' spend (``orchestra show`` says it).

Calls the earlier run made and never got a result for (it stopped for an
approval, at a limit, on a cancel) are answered in words before the new
message, so the transcript stays one a chat API accepts; none is run. The
words are true to what happened: a call that ran and whose result was not
yet in the transcript gets that result; a call that *started* (a write whose
started marker was saved, a call that spawned a child run) and left no result
may have taken effect, and is told so (:data:`STARTED`); only a call that never
started is "not run" (:data:`NOT_RUN`).
"""

from __future__ import annotations

from typing import Any

from ._exceptions import StateError
from ._state import RunState, Status

__all__ = ["NOT_RUN", "STARTED", "continued_messages", "refuse_to_continue"]

NOT_RUN = "Not run: the conversation went on with a new message instead."
"""The result given to a call the continued run never started."""
STARTED = (
    "Started, outcome unknown: the run stopped while this call was running, so it "
    "may or may not have taken effect; the conversation went on with a new message "
    "instead. Check before doing it again."
)
"""The result given to a call the continued run started and left without a result."""


def refuse_to_continue(earlier: RunState, agent_name: str) -> None:
    """Raise :class:`StateError` unless ``earlier`` can be continued by ``agent_name``.

    A run can be continued once it stopped (any status but ``running``), if it
    is a root run (a child's transcript belongs to its parent's call) of the
    same agent.
    """
    if earlier.status is Status.RUNNING:
        raise StateError(f"run {earlier.run_id} is running; continue it once it stops")
    if earlier.parent_id is not None:
        raise StateError(
            f"run {earlier.run_id} is a child of {earlier.parent_id}; continue its root, "
            f"{earlier.root_id}"
        )
    if earlier.agent != agent_name:
        raise StateError(
            f"run {earlier.run_id} is agent {earlier.agent!r}'s; it cannot be continued "
            f"by {agent_name!r}"
        )


def continued_messages(earlier: RunState, message: str) -> list[dict[str, Any]]:
    """The earlier transcript, its unanswered calls answered in words, then ``message``."""
    messages = [dict(m) for m in earlier.messages]
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    last_calls: dict[str, Any] = next(
        (m for m in reversed(messages) if m.get("role") == "assistant"), {}
    )
    for call in last_calls.get("tool_calls") or ():
        if call.get("id") not in answered:
            said = _unanswered(earlier, str(call.get("id")))
            messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": said})
    messages.append({"role": "user", "content": message})
    return messages


def _unanswered(earlier: RunState, call_id: str) -> str:
    """What a call ``earlier`` left out of its transcript is told: its result if it
    ran, :data:`STARTED` if it started, else :data:`NOT_RUN`."""
    if call_id in earlier.results:
        return earlier.results[call_id]
    if call_id in earlier.started or call_id in earlier.children:
        return STARTED
    return NOT_RUN
