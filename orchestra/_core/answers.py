"""What a reply that calls no tool means for its run: an answer, or not.

A reply with no tool call ends its run, except once for an agent that looks
first (``Agent(look_first=True)``) while no tool has run: servers that ignore
``tool_choice: "required"`` (llama.cpp with a custom chat template) let a
small model answer from nothing or describe what it would call. The run then
says so in its transcript (:data:`LOOK_NOTE`, a system message) and asks
again, once. Two kinds of reply are not taken silently for a plain answer:

- a **call written as text** (a declared tool's name as a call's ``"name"``)
  that the endpoint did not parse into ``tool_calls``: nothing ran, so the
  run ends ``failed`` and says so (``recover_tool_calls`` reads such calls);
- an answer that **follows a failed tool call** (a result that starts with
  ``Error:``): the run is ``completed`` but its reason says which call failed
  and how, so that no one takes an answer made up after an error for one
  resting on the results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._model.recover import written_call
from .._state import Status
from .run import Exit

__all__ = ["ANSWERED", "LOOK_NOTE", "answer_exit", "must_look", "tool_ran"]

ANSWERED = "answered"
ERROR_SHOWN = 160
"""Characters of a failed call's result said in the reason."""


LOOK_NOTE = {
    "role": "system",
    "content": "No tool has run yet, so you know nothing yet, and describing a tool "
    "call does not make it. Write the tool call now.",
}
"""What the transcript says when a run that must look first answered without looking."""


def must_look(look_first: bool, messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a reply that calls no tool is sent back: the agent looks first, no
    tool has run, and the run was not already told (:data:`LOOK_NOTE`)."""
    return look_first and not tool_ran(messages) and LOOK_NOTE not in messages


def tool_ran(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the transcript holds a tool result."""
    return any(m.get("role") == "tool" for m in messages)


def answer_exit(messages: Sequence[Mapping[str, Any]], answer: str, names: frozenset[str]) -> Exit:
    """The exit of a run whose last reply, ``answer``, called no tool (``messages``
    the transcript before it; ``names`` the tools the run declared)."""
    called = written_call(answer, names) if names else None
    if called is not None:
        return Exit(
            status=Status.FAILED,
            reason=f"the model wrote a call of {called} as text, which the endpoint did "
            "not read as a tool call: nothing was run, and the reply is no answer "
            "(--recover-tool-calls / recover_tool_calls=True reads such calls)",
        )
    failed = _last_failure(messages)
    if failed is not None:
        return Exit(status=Status.COMPLETED, reason=f"{ANSWERED} after a failed call: {failed}")
    return Exit(status=Status.COMPLETED, reason=ANSWERED)


def _last_failure(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """``read_file: Error: no such file ...`` if a result of the last calls failed."""
    names: dict[str, str] = {}
    for message in reversed(messages):
        if message.get("role") != "tool":
            names = _call_names(message)
            break
    for message in reversed(messages):
        if message.get("role") != "tool":
            return None
        text = message.get("content")
        if isinstance(text, str) and text.startswith("Error:"):
            name = names.get(str(message.get("tool_call_id")), "a tool")
            return f"{name}: {' '.join(text.split())[:ERROR_SHOWN]}"
    return None


def _call_names(message: Mapping[str, Any]) -> dict[str, str]:
    """Each call id of an assistant message with the tool it called."""
    calls = message.get("tool_calls") or ()
    return {str(c.get("id")): str(c.get("function", {}).get("name")) for c in calls}
