"""Wind-down: a run stopped by a limit hands back what it found.

With ``Limits.wind_down_tokens`` set, a run keeps that many output tokens,
and what a call writing them costs, for a final answer. Before each regular
model call the gate asks whether the run is at its end:

- **one turn left** (this run's or an ancestor's turn cap);
- **the deadline one call away** (less time left than two of the run's mean
  turns: the next regular call would leave none for the final one);
- **the budget**: the regular call's worst case, plus the final call's worst
  case after it (the prompt grown by the regular reply and
  :data:`GROWTH_TOKENS` of results, then :data:`NOTE` and ``wind_down_tokens``
  of answer), no longer fits what the run and every ancestor have left.

Only once it has found something (a tool result): its calls before that are
reserved as without wind-down. Then, instead of the regular call, the run
appends :data:`NOTE` (a system message, kept in its transcript) and makes one
last call with no tools and
``max_tokens`` at most ``wind_down_tokens``, reserved like every call (zero
overshoot holds: if even that cannot be paid, the run stops as without
wind-down). It stops with its limit's status and reason, and the reply is its
answer, marked partial (``RunState.answer_partial``); a parent's tool call
receives it with the stop reason (:func:`~orchestra._result.stop_sentence`).
A run winds down once: a final reply that calls tools anyway has its calls
answered in words, never run, and no answer.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ._answers import tool_ran
from ._budget import Grant, carve, reserve
from ._model.margin import FIRST_MARGIN, Margin
from ._model.tokens import count_text
from ._run import Exit, LiveRun
from ._state import Limits, Status

__all__ = [
    "GROWTH_TOKENS",
    "NOTE",
    "WindDown",
    "abandon",
    "applies",
    "begin",
    "carve_keeping",
    "due",
    "end",
    "final_keep",
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
KEEP_MARGIN = Margin(ratio=0.25)
"""The margin the kept share assumes before the provider has replied once (the
final call itself is reserved with the margin learnt by then: if that cannot be
paid, the run stops without an answer, never over its budget)."""
MIN_REGULAR = 64
"""Least output a regular call is granted before the run winds down instead."""
GROWTH_TOKENS = 256
"""Prompt tokens a regular call's tool results are assumed to add (kept for)."""
_NOTE_TOKENS = count_text(str(NOTE["content"])) + 8
_KEY = "orchestra.wind_down"
"""Run metadata: the status and reason of a wind-down under way (its final call
not yet made), so that a resume makes the same final call."""


@attrs.frozen
class WindDown:
    """The run is at its end: the status and reason it will stop with."""

    status: Status
    reason: str


def applies(run: LiveRun) -> bool:
    """Whether the run winds down: it keeps a reserve, and it has found something
    (a tool result: before that, a final answer would have nothing to say, so
    its first calls are reserved as without wind-down)."""
    if not run.state.limits.wind_down_tokens:
        return False
    return tool_ran(run.state.messages)


def wound(run: LiveRun) -> bool:
    """Whether the run began its wind-down (its final call is still to make)."""
    return _KEY in run.state.metadata


def pending(run: LiveRun) -> WindDown:
    """The wind-down the run began (see :func:`begin`)."""
    status, _, reason = run.state.metadata[_KEY].partition(" ")
    return WindDown(Status(status), reason)


def begin(run: LiveRun, wind: WindDown) -> None:
    """Note the wind-down and append :data:`NOTE` (once; saved with the reply)."""
    if not wound(run):
        run.state.metadata[_KEY] = f"{wind.status.value} {wind.reason}"
        run.state.messages.append(dict(NOTE))


def end(run: LiveRun) -> None:
    """The final call is made: the wind-down is over (a later resume calls as usual)."""
    run.state.metadata.pop(_KEY, None)


def abandon(run: LiveRun) -> None:
    """Undo :func:`begin`: the final call could not be paid."""
    run.state.metadata.pop(_KEY, None)
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


def carve_keeping(parent: LiveRun, ask: Limits, now: float) -> Limits | str:
    """:func:`~orchestra._budget.carve`, keeping ``parent``'s own final call out of
    what its child may spend (if the parent winds down)."""
    keep = (0, 0)
    if parent.state.limits.wind_down_tokens:
        messages = parent.state.messages
        prompt = parent.counter.count(messages, parent.agent.tool_specs())
        margin = parent.runner.margin_for(parent.state.model)
        keep = final_keep(parent, prompt, len(messages), margin)
    return carve(parent, ask, now, keep)


def regular_grant(
    run: LiveRun, prompt_tokens: int, messages: int, margin: Margin, wanted: int
) -> Grant | Exit | WindDown:
    """The next regular call's reservation, with the final call's share kept for
    after it; or the run's end, if that leaves it less than :data:`MIN_REGULAR`.

    Two passes: the first finds the most output ``m0`` the budget pays with the
    final call kept for a reply of no tokens; the second reserves at most
    ``m0`` with the final call kept for a reply of ``m0`` (never less than its
    grant needs: what is kept only shrinks as the grant does).
    """
    probe = reserve(
        run,
        prompt_tokens,
        messages,
        margin,
        wanted,
        final_keep(run, prompt_tokens, messages, margin),
    )
    if isinstance(probe, Exit):
        return _budget_end(run, probe)
    _release(run, probe)
    most = probe.max_tokens
    keep = final_keep(run, prompt_tokens, messages, margin, most)
    grant = reserve(run, prompt_tokens, messages, margin, most, keep)
    if isinstance(grant, Exit):
        return _budget_end(run, grant)
    if grant.max_tokens < min(MIN_REGULAR, wanted):
        _release(run, grant)
        return WindDown(Status.BUDGET_EXCEEDED, f"{_which(run)} nearly spent")
    return attrs.evolve(grant, shrunk=grant.max_tokens < wanted)


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


def final_keep(
    run: LiveRun, prompt_tokens: int, messages: int, margin: Margin, regular: int = 0
) -> tuple[int, int]:
    """What the final call would need after a regular reply of ``regular`` tokens
    and its results (pico-dollars, tokens): kept out of what else is reserved."""
    wind = run.state.limits.wind_down_tokens or 0
    grown = prompt_tokens + regular + GROWTH_TOKENS + _NOTE_TOKENS
    if margin == FIRST_MARGIN:  # not learnt yet; learnt by the time of the final call
        margin = KEEP_MARGIN
    prompt = margin.apply(grown, messages + 3)
    price = run.runner.price_of(run.state.model)
    return price.reserved(prompt, wind), prompt + wind
