"""Fair carving: the children one reply starts share what their parent can give.

When a reply of a run starts children (agent tools, or tools marked
``Tool(spawns=True)`` that call ``ctx.run_child``), the first of them to start
fixes a :class:`Plan` for the reply: the *pool* is what the run has left (USD
and tokens, the least over it and its ancestors) less its own answer's reserve
(:func:`answer_reserve`: the prompt of its next call, grown by what the
children may return, and ``Carving.answer_tokens`` of output). Under the
``equal`` split each child's share of the pool is in proportion to its weight;
its limits are then the least of its share, its own limits and what the run
has left less the reserve (:func:`~orchestra._core.budget.carve`). Shares are caps,
not holds: the spend of every child rolls up to the run as it happens, and no
share is larger than what the shares before it left, so no sibling can take
another's.

A child whose share cannot pay one call (its first prompt, counted and widened
by the margin, plus :data:`~orchestra._core.budget.MIN_COMPLETION` tokens of
output) is not started: the plan admits, in call order, as many children as
the pool pays one call each for, and a refused child's share goes to those
after it. A child that ends gives back what it did not spend: to the run, at
once (the cap was never held), and, for children in this process, to the
siblings of its reply still running (:func:`give_back`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._model.margin import Margin
from .._model.tokens import MessageCounter
from .._money import to_usd
from .._state import Limits, RunState, Status
from .budget import MIN_COMPLETION, carve
from .run import LiveRun
from .shape import depth_refusal, inherit, room

__all__ = ["Plan", "answer_reserve", "fair_carve", "first_call_need", "give_back"]

GROWTH_TOKENS = 128
"""Prompt tokens each child's answer is assumed to add to its parent's prompt."""
KEEP_MARGIN = Margin(ratio=0.25)
"""The least margin the answer's reserve assumes on the parent's prompt count (the
answer's call itself is reserved like every call, with the margin learnt by then)."""
_Pair = tuple[int | None, int | None]
"""Pico-dollars and tokens; None: unbounded."""


@attrs.define(kw_only=True, eq=False)
class Plan:
    """How one reply's children share their parent's pool (kept on the parent's live run)."""

    weights: dict[str, float]
    """Calls still to carve, in call order, with their weights."""
    refused: dict[str, _Pair]
    """Calls whose children are not started, with the share they would have had."""
    shaped: dict[str, str] = attrs.Factory(dict)
    """Calls whose children are not started for a limit on the tree's shape, and why."""
    pool: _Pair
    reserve: tuple[int, int]
    need: tuple[int, int]
    given: dict[str, _Pair] = attrs.Factory(dict)
    asked: dict[str, _Pair] = attrs.Factory(dict)


def first_call_need(
    parent: LiveRun, state: RunState, tools: Sequence[dict[str, Any]]
) -> tuple[int, int]:
    """What a new child's first call needs at least (pico-dollars, tokens): its
    prompt as reserved plus :data:`MIN_COMPLETION` tokens of output."""
    pricing = parent.runner.pricing
    counted = MessageCounter().count(state.messages, tools)
    prompt = pricing.margin_for(state.model).apply(counted, len(state.messages))
    pico = pricing.price_of(state.model).reserved(prompt, MIN_COMPLETION)
    return pico, prompt + MIN_COMPLETION


def answer_reserve(parent: LiveRun, children: int) -> tuple[int, int]:
    """What ``parent`` keeps for its own answer after ``children`` children answer
    (pico-dollars, tokens): its transcript grown by
    :data:`GROWTH_TOKENS` per child, widened by the
    margin, and ``Carving.answer_tokens`` of output."""
    answer = parent.agent.carving.answer_tokens
    if not answer:
        return 0, 0
    messages = parent.state.messages
    counted = parent.counter.count(messages, parent.agent.tool_specs())
    margin = parent.runner.pricing.margin_for(parent.state.model).widened(KEEP_MARGIN)
    prompt = margin.apply(counted + GROWTH_TOKENS * children, len(messages) + children)
    output = min(answer, parent.reply_cap)
    pico = parent.runner.pricing.price_of(parent.state.model).reserved(prompt, output)
    return pico, prompt + output


def fair_carve(
    parent: LiveRun, call_id: str, child: RunState, tools: Sequence[dict[str, Any]], now: float
) -> Limits | str:
    """The limits of the child ``child`` (not started yet) for ``call_id``, or why
    it is not started (see the module's docstring)."""
    need = first_call_need(parent, child, tools)
    plan = _plan_for(parent, call_id, need)
    bound = room(parent)  # again: children of other replies may have started since
    if call_id not in plan.shaped and bound is not None and bound[0] <= 0:
        _refuse_for_shape(plan, call_id, bound[1])
    if call_id in plan.shaped:
        return plan.shaped[call_id]
    if call_id in plan.refused:
        return _refusal(plan, need, plan.refused[call_id])
    if parent.agent.carving.split == "as_left":
        share = _pool(parent, plan.reserve)
    else:
        share = _share(plan, call_id, plan.weights.get(call_id, 1.0))
    if _short(share, need):
        plan.refused[call_id] = share
        plan.weights.pop(call_id, None)
        return _refusal(plan, need, share)
    plan.weights.pop(call_id, None)
    ask = child.limits
    plan.asked[call_id] = (ask.budget_pico, ask.max_tokens_total)
    limits = carve(parent, inherit(parent, _capped(ask, share)), now, plan.reserve)
    if not isinstance(limits, Limits):
        return limits
    carved = (limits.budget_pico, limits.max_tokens_total)
    if _short(carved, need):  # its own limits are below one call
        return _refusal(plan, need, carved)
    plan.given[call_id] = carved
    return limits


def give_back(parent: LiveRun, child: LiveRun) -> None:
    """``child`` ended: what its share did not spend goes to its siblings of the
    same reply still running in this process (in equal parts, never past what
    each asked for). The parent has it back already: shares are not held."""
    call_id = child.state.parent_call_id or ""
    plan = _plan_of(parent, call_id)
    if plan is None or call_id not in plan.given:
        return
    pico = plan.given[call_id][0]
    if pico is None:
        return
    left = pico - child.state.tree.cost_pico
    running = [
        c
        for c in parent.children
        if c is not child
        and c.state.status is Status.RUNNING
        and (c.state.parent_call_id or "") in plan.given
    ]
    if left <= 0 or not running:
        return
    for sibling in running:
        _raise_budget(plan, sibling, left // len(running))


def _raise_budget(plan: Plan, sibling: LiveRun, extra: int) -> None:
    limits = sibling.state.limits
    if limits.budget_pico is None:
        return
    asked = plan.asked.get(sibling.state.parent_call_id or "", (None, None))[0]
    raised = limits.budget_pico + extra
    if asked is not None:
        raised = min(raised, asked)
    if raised > limits.budget_pico:
        sibling.state.limits = attrs.evolve(limits, max_budget_usd=to_usd(raised))


# -- the plan ---------------------------------------------------------------------------


def _plan_for(parent: LiveRun, call_id: str, need: tuple[int, int]) -> Plan:
    """The plan of the reply that holds ``call_id`` (made on its first child, whose
    first call's ``need`` stands for every child's when admitting them)."""
    plan = _plan_of(parent, call_id)
    if plan is not None:
        return plan
    calls = _reply_calls(parent, call_id)
    reserve = answer_reserve(parent, len(calls))
    plan = Plan(
        weights=dict(calls), refused={}, pool=_pool(parent, reserve), reserve=reserve, need=need
    )
    _shape(plan, parent)
    if parent.agent.carving.split == "equal":
        _admit(plan)
    parent.plans.append(plan)
    return plan


def _plan_of(parent: LiveRun, call_id: str) -> Plan | None:
    """The plan that holds ``call_id``, if one was made."""
    plans: list[Plan] = parent.plans
    for plan in plans:
        held = (plan.weights, plan.refused, plan.given, plan.shaped)
        if any(call_id in calls for calls in held):
            return plan
    return None


def _shape(plan: Plan, parent: LiveRun) -> None:
    """Refuse the calls over a limit on the tree's shape (the last ones, in call
    order): their shares go to the others."""
    why = depth_refusal(parent)
    if why is not None:
        over = list(plan.weights)
    else:
        bound = room(parent)
        if bound is None or bound[0] >= len(plan.weights):
            return
        over, why = list(plan.weights)[max(bound[0], 0) :], bound[1]
    for call_id in over:
        _refuse_for_shape(plan, call_id, why)


def _refuse_for_shape(plan: Plan, call_id: str, why: str) -> None:
    """``call_id``'s child is not started for a limit on the tree's shape (``why``)."""
    plan.weights.pop(call_id, None)
    plan.shaped[call_id] = f"{why} (the run goes on with what it has)"


def _reply_calls(parent: LiveRun, call_id: str) -> list[tuple[str, float]]:
    """The calls of the reply holding ``call_id`` that start children not started
    yet (agent tools, and ``call_id`` itself), with their weights."""
    messages = parent.state.messages
    weights = parent.agent.carving.weights
    for index in range(len(messages) - 1, -1, -1):
        calls = messages[index].get("tool_calls") or []
        ids = [call.get("id") for call in calls]
        if call_id not in ids:
            continue
        found = [
            (call["id"], float(weights.get(_name(call), 1.0)))
            for call in calls
            if call["id"] == call_id or _starts_child(parent, call, parent.state.children)
        ]
        return found
    return [(call_id, 1.0)]


def _name(call: dict[str, Any]) -> str:
    return str((call.get("function") or {}).get("name", ""))


def _starts_child(parent: LiveRun, call: dict[str, Any], bound: Mapping[str, str]) -> bool:
    """Whether ``call`` starts a child not started yet (an agent tool's call, not bound)."""
    tool = parent.agent.tool(_name(call))
    spawns = tool is not None and (tool.spawns or tool.agent is not None)
    return spawns and call["id"] not in bound


def _pool(parent: LiveRun, reserve: tuple[int, int]) -> _Pair:
    pico, tokens = parent.available_pico(), parent.available_tokens()
    return (
        None if pico is None else max(pico - reserve[0], 0),
        None if tokens is None else max(tokens - reserve[1], 0),
    )


def _admit(plan: Plan) -> None:
    """Refuse, from the last call back, children whose equal share could not pay
    one call, until every child left can (their shares grow as others go)."""
    while len(plan.weights) > 1:
        last = next(reversed(plan.weights))
        shares = [_share(plan, call_id, w) for call_id, w in plan.weights.items()]
        if not any(_short(share, plan.need) for share in shares):
            return
        plan.refused[last] = shares[-1]
        plan.weights.pop(last)


def _share(plan: Plan, call_id: str, weight: float) -> _Pair:
    """``call_id``'s part of what the pool has not given yet, by weight among the
    calls still to carve (itself included)."""
    total = sum(plan.weights.values()) + (0.0 if call_id in plan.weights else weight)

    def part(pool: int | None, index: int) -> int | None:
        if pool is None:
            return None
        given = sum(g[index] or 0 for g in plan.given.values())
        return int(max(pool - given, 0) * weight / total)

    return part(plan.pool[0], 0), part(plan.pool[1], 1)


def _short(share: _Pair, need: tuple[int, int]) -> bool:
    return any(s is not None and s < n for s, n in zip(share, need, strict=True))


def _capped(ask: Limits, share: _Pair) -> Limits:
    pico, tokens = share
    if pico is not None:
        usd = to_usd(pico)
        ask = attrs.evolve(
            ask, max_budget_usd=usd if ask.max_budget_usd is None else min(usd, ask.max_budget_usd)
        )
    if tokens is not None:
        ask = attrs.evolve(
            ask,
            max_tokens_total=tokens
            if ask.max_tokens_total is None
            else min(tokens, ask.max_tokens_total),
        )
    return ask


def _refusal(plan: Plan, need: tuple[int, int], share: _Pair) -> str:
    """Why a child is not started, in the words its parent's tool call gets."""
    pico, tokens = share
    if pico is not None and pico < need[0]:
        what = f"${to_usd(need[0]):.6f} needed, ${to_usd(pico):.6f} left"
    else:
        what = f"{need[1]} tokens needed, {tokens} left"
    kept = (
        f"; the run keeps ${to_usd(plan.reserve[0]):.6f} for its own answer"
        if plan.reserve[0]
        else ""
    )
    return f"not enough budget left for this child: {what} for one call{kept}"
