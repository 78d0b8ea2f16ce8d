"""What a finished (or stopped) run hands back: its state and its children's."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Generic

import attrs

from ._money import to_usd
from ._output import OutputT
from ._state import RunState, Status

__all__ = ["RunResult", "child_order", "stop_sentence"]


@attrs.frozen(kw_only=True)
class RunResult(Generic[OutputT]):
    """A run's final state and its children's results, as plain data.

    A stopped run is a result too: ``status`` says how it ended and the state
    keeps its partial transcript and usage. Generic in the type of its
    :attr:`output`: ``Runner.run`` of an ``Agent[Report]`` gives a
    ``RunResult[Report]`` (unparametrised: ``Any``).
    """

    state: RunState
    children: tuple[RunResult, ...] = ()
    output: OutputT | None = None
    """The structured answer (see :mod:`orchestra._output`): an instance of the
    agent's output class (an attrs class, a dataclass, a pydantic model) if it
    gave one, else the JSON value (a schema, a TypedDict); None without one or
    when the run did not complete."""

    @property
    def status(self) -> Status:
        return self.state.status

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def answer(self) -> str | None:
        return self.state.answer

    @property
    def answer_partial(self) -> bool:
        """The answer is a wind-down's: the run stopped at a limit (its status)."""
        return self.state.answer_partial

    @property
    def cost_usd(self) -> float:
        """This run's own model spend."""
        return to_usd(self.state.own.cost_pico)

    @property
    def tree_cost_usd(self) -> float:
        """Spend of this run and every descendant."""
        return to_usd(self.state.tree.cost_pico)

    def walk(self) -> list[RunResult]:
        """This result and every descendant's, depth first."""
        return [self, *(r for child in self.children for r in child.walk())]

    def ordered_children(self) -> tuple[RunResult, ...]:
        """The children in the order of the calls that started them (see :func:`child_order`)."""
        key = child_order(self.state)
        return tuple(sorted(self.children, key=lambda child: key(child.state)))

    def summary(self) -> dict[str, Any]:
        """The fields the CLI prints, recursively over children (in call order)."""
        s = self.state
        return {
            "run_id": s.run_id,
            "root_id": s.root_id,
            "parent_id": s.parent_id,
            "parent_call_id": s.parent_call_id,
            "agent": s.agent,
            "status": s.status.value,
            "reason": s.reason,
            "interruption": s.interruption.to_dict() if s.interruption else None,
            "turns": s.turns,
            "tool_runs": s.own.tool_runs,
            "prompt_tokens": s.own.prompt_tokens,
            "completion_tokens": s.own.completion_tokens,
            "cached_input_tokens": s.own.cached_input_tokens,
            "reasoning_tokens": s.own.reasoning_tokens,
            "cost_usd": round(self.cost_usd, 9),
            "tree_cost_usd": round(self.tree_cost_usd, 9),
            "budget_usd": s.limits.max_budget_usd,
            "tree_tokens": s.tree.tokens,
            "tree_cached_input_tokens": s.tree.cached_input_tokens,
            "tree_reasoning_tokens": s.tree.reasoning_tokens,
            "budget_tokens": s.limits.max_tokens_total,
            "budget_left_usd": _left(s.limits.max_budget_usd, self.tree_cost_usd),
            "tokens_left": _left(s.limits.max_tokens_total, s.tree.tokens),
            "max_turns": s.limits.max_turns,
            "shape_limits": s.limits.shape(),
            "settings": None if s.settings is None else s.settings.saved(),
            "answer": self.answer,
            "answer_partial": s.answer_partial,
            "output": s.output,
            "continues": s.continues,
            "conversation_id": s.conversation,
            "children": [c.summary() for c in self.ordered_children()],
        }


def _left(budget: float | None, spent: float) -> Any:
    return None if budget is None else round(max(budget - spent, 0), 9)


def child_order(parent: RunState) -> Callable[[RunState], tuple[float, float, str]]:
    """A sort key for ``parent``'s child runs: the position of the call that
    started each in ``parent``'s transcript, then creation time (for a child
    whose call is not there), then run id.

    Children of one reply start concurrently, so their creation order changes
    from run to run; the order of the calls does not.
    """
    calls = (c.get("id") for m in parent.messages for c in m.get("tool_calls") or ())
    position = {call_id: float(i) for i, call_id in enumerate(calls)}

    def key(child: RunState) -> tuple[float, float, str]:
        at = position.get(child.parent_call_id or "", math.inf)
        return at, child.created_at, child.run_id

    return key


def stop_sentence(result: RunResult) -> str:
    """How a child run reports to its parent: its answer, or why it stopped."""
    s = result.state
    if s.status is Status.COMPLETED:
        return s.answer or ""
    why = f": {s.reason}" if s.reason else ""
    stopped = (
        f"{s.agent} stopped: {s.status.value} after {s.turns} turn{'' if s.turns == 1 else 's'}, "
        f"spent ${to_usd(s.tree.cost_pico):.4f}{why}"
    )
    if s.answer_partial and s.answer:
        return f"{stopped}. Its partial answer, from what it found: {s.answer}"
    return stopped
