"""The budget gate: limits checked and money reserved *before* a model call.

Before each call the prompt is counted exactly (o200k_base, each message once),
the worst case (prompt + ``max_tokens`` of output) is priced, and that much is
reserved against the run and every ancestor. If what is left cannot pay for
the prompt plus :data:`MIN_COMPLETION` tokens, the run stops
``budget_exceeded`` without calling; otherwise ``max_tokens`` is lowered to
what is left. After the reply the real cost is charged and the reservation
released, in one step with no checkpoint between them.

Guarantee: with a provider whose token counts are at most ours (the scripted
provider counts with the same function, so they are equal) and which honours
``max_tokens``, no run's tree spend ever exceeds its budget. Against another
provider, set ``Runner(prompt_margin=...)``: the prompt is reserved as
``tokens * (1 + ratio) + tokens_floor``; the bound holds as long as the
provider's prompt count stays within that margin of ours.
"""

from __future__ import annotations

import math
from typing import TypeVar

import attrs

from ._money import to_usd
from ._provider import ChatReply
from ._run import Exit, LiveRun
from ._state import Limits, Status, Usage

_N = TypeVar("_N", int, float)

__all__ = ["MIN_COMPLETION", "Grant", "Margin", "carve", "check_turns", "reserve", "settle"]

MIN_COMPLETION = 16
"""The least completion worth paying a prompt for, in tokens."""


@attrs.frozen(kw_only=True)
class Margin:
    """Slack added to our prompt count when reserving (for providers that count differently)."""

    ratio: float = 0.0
    tokens: int = 0

    def apply(self, prompt_tokens: int) -> int:
        """The prompt size to reserve for."""
        return math.ceil(prompt_tokens * (1 + self.ratio)) + self.tokens


@attrs.frozen(kw_only=True)
class Grant:
    """A reservation held for one model call."""

    pico: int
    max_tokens: int
    shrunk: bool


def check_turns(run: LiveRun) -> Exit | None:
    """``max_turns_exceeded`` if this run or an ancestor has no model call left."""
    left = run.available_turns()
    if left is None or left[0] > 0:
        return None
    node = left[1]
    whose = "" if node is run else f" of ancestor run {node.state.run_id}"
    return Exit(
        status=Status.MAX_TURNS_EXCEEDED,
        reason=f"turn limit{whose} reached: {node.state.limits.max_turns} model calls",
    )


def reserve(run: LiveRun, prompt_tokens: int, margin: Margin) -> Grant | Exit:
    """Reserve the worst case of the next call, or say why it cannot be paid."""
    price = run.runner.prices[run.state.model]
    prompt = margin.apply(prompt_tokens)
    max_tokens = run.agent.max_tokens
    available = run.available_pico()
    if available is not None:
        affordable = price.affordable_completion(available, prompt)
        if affordable < MIN_COMPLETION:
            return _unaffordable(run, available, price.cost(prompt, MIN_COMPLETION), prompt)
        max_tokens = min(max_tokens, affordable)
    grant = Grant(
        pico=price.cost(prompt, max_tokens),
        max_tokens=max_tokens,
        shrunk=max_tokens < run.agent.max_tokens,
    )
    run.reserve(grant.pico, 1)
    return grant


def _unaffordable(run: LiveRun, available: int, needed: int, prompt: int) -> Exit:
    return Exit(
        status=Status.BUDGET_EXCEEDED,
        reason=(
            f"budget: ${to_usd(max(available, 0)):.6f} left, the next call needs at least "
            f"${to_usd(needed):.6f} ({prompt} prompt tokens + {MIN_COMPLETION} output)"
        ),
    )


def settle(run: LiveRun, grant: Grant, reply: ChatReply | None) -> Usage:
    """Release ``grant`` and charge what the reply really cost (nothing if no reply)."""
    run.reserve(-grant.pico, -1)
    if reply is None:
        return Usage()
    price = run.runner.prices[run.state.model]
    usage = Usage(
        model_calls=1,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        cost_pico=price.cost(reply.prompt_tokens, reply.completion_tokens),
    )
    run.charge(usage)
    return usage


def carve(parent: LiveRun, requested: Limits, now: float) -> Limits | str:
    """A child's limits: what it asks for, within what ``parent`` has left.

    Returns the child's limits, or the reason it cannot start.
    """
    limits = requested.anchored(now)
    budget = parent.available_pico()
    if budget is not None:
        if budget <= 0:
            return f"the parent run has no budget left (${to_usd(max(budget, 0)):.6f})"
        limits = attrs.evolve(limits, max_budget_usd=_least(to_usd(budget), limits.max_budget_usd))
    turns = parent.available_turns()
    if turns is not None:
        if turns[0] <= 0:
            return "the parent run has no model calls left"
        limits = attrs.evolve(limits, max_turns=_least(turns[0], limits.max_turns))
    deadline = parent.state.limits.deadline
    if deadline is not None:
        limits = attrs.evolve(limits, deadline=_least(deadline, limits.deadline))
    return limits


def _least(parents: _N, asked: _N | None) -> _N:
    """The parent's remaining value, or the child's request if that is smaller."""
    return parents if asked is None else min(parents, asked)
