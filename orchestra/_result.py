"""What a finished (or stopped) run hands back: its state and its children's."""

from __future__ import annotations

from typing import Any

import attrs

from ._money import to_usd
from ._state import RunState, Status

__all__ = ["RunResult", "stop_sentence"]


@attrs.frozen(kw_only=True)
class RunResult:
    """A run's final state and its children's results, as plain data.

    A stopped run is a result too: ``status`` says how it ended and the state
    keeps its partial transcript and usage.
    """

    state: RunState
    children: tuple[RunResult, ...] = ()

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

    def summary(self) -> dict[str, Any]:
        """The fields the CLI prints, recursively over children."""
        s = self.state
        return {
            "run_id": s.run_id,
            "parent_id": s.parent_id,
            "agent": s.agent,
            "status": s.status.value,
            "reason": s.reason,
            "interruption": s.interruption.to_dict() if s.interruption else None,
            "turns": s.turns,
            "tool_runs": s.own.tool_runs,
            "prompt_tokens": s.own.prompt_tokens,
            "completion_tokens": s.own.completion_tokens,
            "cost_usd": round(self.cost_usd, 9),
            "tree_cost_usd": round(self.tree_cost_usd, 9),
            "budget_usd": s.limits.max_budget_usd,
            "tree_tokens": s.tree.tokens,
            "budget_tokens": s.limits.max_tokens_total,
            "answer": self.answer,
            "children": [c.summary() for c in self.children],
        }


def stop_sentence(result: RunResult) -> str:
    """How a child run reports to its parent: its answer, or why it stopped."""
    s = result.state
    if s.status is Status.COMPLETED:
        return s.answer or ""
    why = f": {s.reason}" if s.reason else ""
    return (
        f"{s.agent} stopped: {s.status.value} after {s.turns} turns, "
        f"spent ${to_usd(s.tree.cost_pico):.4f}{why}"
    )
