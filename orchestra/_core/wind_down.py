"""Wind-down: a run stopped by a limit hands back what it found.

Once a run has found something (a tool result), its end by a limit keeps it:

- **the budget**: when what the run and its ancestors have left cannot pay
  the next call with :data:`MIN_REGULAR` tokens of output, the run stops
  ``budget_exceeded`` and *hands back* what its tools returned, quoted, as its
  partial answer (:func:`hand_back`; no model call: there is no budget for
  one). Nothing is kept from the regular calls for a final call, so a run
  with the budget for another call makes it, and may find what it was asked.
- **one turn left** (this run's turn cap), or **the deadline one call away**
  (less time left than two of the run's mean turns): with
  ``Limits.wind_down_tokens`` set, instead of the regular call the run
  appends :data:`NOTE` (a system message, kept in its transcript) and makes
  one last call with no tools and ``max_tokens`` at most
  ``wind_down_tokens``, reserved like every call; if even that cannot be
  paid, it hands back what its tools returned. It stops with its limit's
  status and reason, and the reply is its answer, marked partial.

Either way the answer is marked partial (``RunState.answer_partial``) and a
parent's tool call receives it with the stop reason
(:func:`~orchestra._result.stop_sentence`). A handed-back answer is an
assistant message that says it was written by Orchestra, not the model. A
run winds down once: a final reply that calls tools anyway has its calls
answered in words, never run, and no answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from .._model.margin import Margin
from .._state import Status, WindDown
from .answers import tool_ran
from .budget import Grant, reserve
from .run import Exit, LiveRun

__all__ = [
    "NOTE",
    "WindDown",
    "abandon",
    "applies",
    "begin",
    "due",
    "end",
    "findings",
    "hand_back",
    "pending",
    "regular_grant",
    "wound",
]

NOTE: dict[str, Any] = {
    "role": "system",
    "content": "Your limit is nearly reached: this is your last reply, and you cannot "
    "call tools any more. Give your best answer now from what you have found so far, "
    "and say what you could not find out.",
}
"""What the transcript says before the final call."""
MIN_REGULAR = 64
"""Least output a regular call is granted before the run hands back what it found."""
FINDING_CHARS = 600
"""The most of one tool result a handed-back answer quotes."""
FINDINGS_CHARS = 4000
"""The most a handed-back answer quotes in all (the latest results kept)."""
_LEGACY_KEY = "orchestra.wind_down"
"""Where versions before ``RunState.winding_down`` noted a wind-down under way
(run metadata, ``"STATUS REASON"``): read once, then moved to the field."""


def applies(run: LiveRun) -> bool:
    """Whether the run winds down: ``wind_down_tokens`` is set, its limits stop
    it (not ``on_limit="ask"``), and it has found something (a tool result:
    before that, there is nothing to hand back)."""
    if not run.state.limits.wind_down_tokens or run.state.limits.asks:
        return False  # a run that asks at its limit pauses there with its answer so far
    return tool_ran(run.state.messages)


def wound(run: LiveRun) -> bool:
    """Whether the run began its wind-down (its final call is still to make)."""
    return _under_way(run) is not None


def pending(run: LiveRun) -> WindDown:
    """The wind-down the run began (see :func:`begin`)."""
    wind = _under_way(run)
    assert wind is not None, "pending() of a run that is not winding down"
    return wind


def _under_way(run: LiveRun) -> WindDown | None:
    """``state.winding_down``; a note left in the metadata by an older version is
    moved there first."""
    state = run.state
    legacy = state.metadata.pop(_LEGACY_KEY, None)
    if legacy is not None:
        status, _, reason = legacy.partition(" ")
        state.winding_down = WindDown(Status(status), reason)
    return state.winding_down


def begin(run: LiveRun, wind: WindDown) -> None:
    """Note the wind-down and append :data:`NOTE` (once; saved with the reply)."""
    if not wound(run):
        run.state.winding_down = wind
        run.state.messages.append(dict(NOTE))


def end(run: LiveRun) -> None:
    """The final call is made: the wind-down is over (a later resume calls as usual)."""
    run.state.winding_down = None


def abandon(run: LiveRun) -> None:
    """Undo :func:`begin`: the final call could not be paid."""
    run.state.winding_down = None
    if run.state.messages and run.state.messages[-1] == NOTE:
        run.state.messages.pop()


def due(run: LiveRun) -> WindDown | None:
    """A wind-down for a turn cap or deadline one call away, if any (the budget
    is checked by the gate, with :func:`final_keep`)."""
    left = run.available_turns()
    if left is not None and left[0] == 1:
        return WindDown(Status.MAX_TURNS_EXCEEDED, "turn limit one call away")
    turns = run.state.turns
    if turns and run.deadline != float("inf"):
        running = 0.0 if run.clock_started is None else trio.current_time() - run.clock_started
        per_turn = (run.state.elapsed_s + running) / turns
        if run.deadline - trio.current_time() < 2 * per_turn:  # no time for two more
            return WindDown(Status.DEADLINE_EXCEEDED, "the deadline is one call away")
    return None


def regular_grant(
    run: LiveRun, prompt_tokens: int, messages: int, margin: Margin, wanted: int
) -> Grant | Exit | WindDown:
    """The next regular call's reservation; or, if the budget cannot pay one with
    at least :data:`MIN_REGULAR` tokens of output, the run's end by the budget
    (it then hands back what its tools returned: see :func:`hand_back`).

    Nothing is kept from the regular calls for a final one: a run with budget
    for another call makes it (it may find what it was asked for), and a run
    without it has no budget for a final call either.
    """
    grant = reserve(run, prompt_tokens, messages, margin, wanted)
    if isinstance(grant, Exit):
        return _budget_end(run, grant)
    if grant.max_tokens < min(MIN_REGULAR, wanted):
        _release(run, grant)
        return WindDown(Status.BUDGET_EXCEEDED, f"{_which(run)} nearly spent")
    return grant


def _release(run: LiveRun, grant: Grant) -> None:
    run.reserve(-grant.pico, -1, -grant.tokens)


def _budget_end(run: LiveRun, stop: Exit) -> Exit | WindDown:
    """A budget stop becomes the run's wind-down (any other stays as it is)."""
    if stop.status is not Status.BUDGET_EXCEEDED or run.overspent() is not None:
        return stop
    return WindDown(Status.BUDGET_EXCEEDED, f"{_which(run)} nearly spent")


def _which(run: LiveRun) -> str:
    """``token budget`` when only a token budget bounds the run, else ``budget``."""
    only_tokens = run.available_pico() is None and run.available_tokens() is not None
    return "token budget" if only_tokens else "budget"


def hand_back(run: LiveRun, stop: Exit) -> None:
    """Stop with ``stop``, handing back what the run's tools returned as its
    partial answer: no model call (there is no budget for one, or the final
    call could not be paid), written into the transcript as Orchestra's words."""
    run.state.messages.append({"role": "assistant", "content": findings(run.state.messages, stop)})
    run.state.answer_partial = True
    run.finish(attrs.evolve(stop, reason=f"{stop.reason}: handed back what its tools returned"))


def findings(messages: Sequence[Mapping[str, Any]], stop: Exit) -> str:
    """What a run's tools returned, as a partial answer: the latest results first
    kept, each cut at :data:`FINDING_CHARS`, in all at most :data:`FINDINGS_CHARS`."""
    calls: dict[str, str] = {}
    found: list[str] = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            calls[call.get("id", "")] = (
                f"{function.get('name', '?')}({function.get('arguments', '')})"
            )
        if message.get("role") == "tool":
            said = _cut(str(message.get("content", "")), FINDING_CHARS)
            found.append(f"- {calls.get(message.get('tool_call_id', ''), 'a tool')}: {said}")
    kept: list[str] = []
    for line in reversed(found):
        if sum(map(len, kept)) + len(line) > FINDINGS_CHARS:
            break
        kept.insert(0, line)
    head = f"[Written by Orchestra, not the model: {stop.reason}, so the run stopped before "
    head += "it could answer.]"
    if not kept:
        return f"{head} Its tools returned nothing yet."
    left = len(found) - len(kept)
    more = f" ({left} earlier results left out)" if left else ""
    return f"{head} What its tools returned{more}:\n" + "\n".join(kept)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
