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
message, so the transcript stays one a chat API accepts; none is run.
"""

from __future__ import annotations

from typing import Any

from ._exceptions import StateError
from ._state import RunState, Status

__all__ = ["NOT_RUN", "continued_messages", "refuse_to_continue"]

NOT_RUN = "Not run: the conversation went on with a new message instead."
"""The result given to a call the continued run left without one."""


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
            messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": NOT_RUN})
    messages.append({"role": "user", "content": message})
    return messages
