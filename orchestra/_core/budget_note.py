"""A short note of what a run has left, for the model to plan by.

With ``Agent(budget_note=True)`` each request of the run ends with a system
message such as ``Left for this task: 3 of 8 model calls, $0.0042 of $0.0100,
41 s.`` (what applies: turns, USD, tokens, time; an ancestor's tighter
limits included, as the gate counts them). It is part of the request only,
counted in the prompt like everything else; never saved in the transcript,
so never carried into a resume or a child's transcript.
"""

from __future__ import annotations

import trio

from .._money import to_usd
from .run import LiveRun

__all__ = ["budget_note"]


def budget_note(run: LiveRun) -> str:
    """``Left for this task: ...`` (or that nothing is bounded)."""
    parts = [part for part in (_turns(run), _usd(run), _tokens(run), _time(run)) if part]
    if not parts:
        return "Left for this task: no limit on calls, budget or time."
    return "Left for this task: " + ", ".join(parts) + "."


def _turns(run: LiveRun) -> str:
    left = run.available_turns()
    cap = run.state.limits.max_turns
    if left is None:
        return ""
    of = f" of {cap}" if cap is not None and left[1] is run else ""
    return f"{left[0]}{of} model call{'' if left[0] == 1 else 's'}"


def _usd(run: LiveRun) -> str:
    left = run.available_pico()
    budget = run.state.limits.max_budget_usd
    if left is None:
        return ""
    of = f" of ${budget:.4f}" if budget is not None else ""
    return f"${max(to_usd(left), 0.0):.4f}{of}"


def _tokens(run: LiveRun) -> str:
    left = run.available_tokens()
    return "" if left is None else f"{max(left, 0):,} tokens"


def _time(run: LiveRun) -> str:
    if run.deadline == float("inf"):
        return ""
    return f"{max(run.deadline - trio.current_time(), 0.0):.0f} s"
