"""The budget gate: limits checked and money reserved *before* a model call.

Before each call the prompt is counted exactly (o200k_base, each message once),
the worst case (prompt + ``max_tokens`` of output) is priced, and that much is
reserved against the run and every ancestor. If what is left cannot pay for
the prompt plus :data:`MIN_COMPLETION` tokens, the run stops
``budget_exceeded`` without calling; otherwise ``max_tokens`` is lowered to
what is left. After the reply the real cost is charged and the reservation
released, in one step with no checkpoint between them.

Two budgets work this way: USD (``Limits.max_budget_usd``, priced by the
runner's :class:`~orchestra.PriceTable`) and tokens (``Limits.max_tokens_total``,
no prices needed). Both are carved down the tree.

Guarantee: with a provider whose prompt counts stay within the reserved
margin of ours (see :mod:`orchestra._model.margin`: learnt per provider and model,
conservative before the first reply) and which honours ``max_tokens``, no
run's tree spend ever exceeds its budget. If it does anyway (a provider that
ignores ``max_tokens``), the run stops ``budget_exceeded`` saying by how much,
never ``completed``.
"""

from __future__ import annotations

from typing import TypeVar

import attrs

from .._model.margin import Margin
from .._model.provider import ChatReply
from .._model.tokens import count_completion
from .._money import Price, to_usd
from .._state import Limits, Status, Usage
from .run import Exit, LiveRun

_N = TypeVar("_N", int, float)

__all__ = [
    "MIN_COMPLETION",
    "Grant",
    "carve",
    "charge_partial",
    "check_turns",
    "overspent_reason",
    "reserve",
    "settle",
]

MIN_COMPLETION = 16
"""The least completion worth paying a prompt for, in tokens."""


@attrs.frozen(kw_only=True)
class Grant:
    """A reservation held for one model call: ``prompt`` tokens (margin included)
    plus up to ``max_tokens`` of output, worth ``pico``."""

    pico: int
    prompt: int
    max_tokens: int
    shrunk: bool

    @property
    def tokens(self) -> int:
        """Tokens held against token budgets."""
        return self.prompt + self.max_tokens


def check_turns(run: LiveRun) -> Exit | None:
    """``max_turns_exceeded`` if this run has made its ``max_turns`` model calls."""
    left = run.available_turns()
    if left is None or left[0] > 0:
        return None
    return Exit(
        status=Status.MAX_TURNS_EXCEEDED,
        reason=f"turn limit reached: {_calls(run.state.limits.max_turns)} of its own",
    )


def _calls(count: int | None) -> str:
    return f"{count} model call" if count == 1 else f"{count} model calls"


def reserve(
    run: LiveRun,
    prompt_tokens: int,
    messages: int,
    margin: Margin,
    wanted: int | None = None,
    keep: tuple[int, int] = (0, 0),
) -> Grant | Exit:
    """Reserve the worst case of the next call, or say why it cannot be paid.

    The prompt is reserved as ``margin.apply(prompt_tokens, messages)``;
    ``max_tokens`` (``wanted``, else the agent's) is lowered to what both the
    USD and the token budget of this run and every ancestor still pay for,
    less ``keep`` (pico-dollars, tokens: kept for a later call).
    """
    price = run.runner.pricing.price_of(run.state.model)
    prompt = margin.apply(prompt_tokens, messages)
    wanted = run.reply_cap if wanted is None else wanted
    max_tokens = wanted
    for cap in (_usd_cap(run, price, prompt, keep[0]), _token_cap(run, prompt, keep[1])):
        if isinstance(cap, Exit):
            return cap
        if cap is not None:
            max_tokens = min(max_tokens, cap)
    grant = Grant(
        pico=price.reserved(prompt, max_tokens),
        prompt=prompt,
        max_tokens=max_tokens,
        shrunk=max_tokens < wanted,
    )
    run.reserve(grant.pico, 1, grant.tokens)
    return grant


def _usd_cap(run: LiveRun, price: Price, prompt: int, keep: int = 0) -> int | Exit | None:
    """Output tokens the USD budgets still pay for after ``prompt`` and ``keep``
    (pico-dollars); None if unbounded."""
    available = run.available_pico()
    if available is None:
        return None
    available -= keep
    affordable = price.affordable_completion(available, prompt)
    if affordable >= MIN_COMPLETION:
        return affordable
    if available < 0:
        return _overspent(run)
    needed = to_usd(price.reserved(prompt, MIN_COMPLETION))
    return _budget_exit(
        f"budget{_whose(run, 'usd')}: ${to_usd(available):.6f} left, the next call needs at "
        f"least ${needed:.6f} ({prompt} prompt tokens reserved + {MIN_COMPLETION} output)"
    )


def _whose(run: LiveRun, kind: str) -> str:
    """Whose budget stops ``run``: nothing for its own, else the ancestor's, named
    (a budget counts the whole tree of the run that has it)."""
    node = run.tightest(kind)
    if node is None or node is run:
        return ""
    return f" of ancestor run {node.state.run_id} (its whole tree)"


def _token_cap(run: LiveRun, prompt: int, keep: int = 0) -> int | Exit | None:
    """Output tokens the token budgets still allow after ``prompt`` and ``keep``;
    None if unbounded."""
    available = run.available_tokens()
    if available is None:
        return None
    available -= keep
    if available - prompt >= MIN_COMPLETION:
        return available - prompt
    if available < 0:
        return _overspent(run)
    return _budget_exit(
        f"token budget{_whose(run, 'tokens')}: {available} tokens left, the next call needs "
        f"at least {prompt + MIN_COMPLETION} ({prompt} prompt tokens reserved + "
        f"{MIN_COMPLETION} output)"
    )


def _overspent(run: LiveRun) -> Exit:
    over = run.overspent()
    if over is None:  # spent up to the cap with calls in flight elsewhere in the tree
        return _budget_exit("budget: nothing left while other calls of the tree are in flight")
    return _budget_exit(overspent_reason(run, *over))


def overspent_reason(run: LiveRun, node: LiveRun, how_much: str) -> str:
    """Why a run stops once its tree (or an ancestor's) spent past a budget."""
    whose = "" if node is run else f" of ancestor run {node.state.run_id}"
    return (
        f"over budget{whose}: {how_much} (the provider counted more than was "
        "reserved or ignored max_tokens)"
    )


def _budget_exit(reason: str) -> Exit:
    return Exit(status=Status.BUDGET_EXCEEDED, reason=reason)


def settle(run: LiveRun, grant: Grant, reply: ChatReply | None, arrived: int = 0) -> Usage:
    """Release ``grant`` and charge what the reply really cost.

    A reply without usage is charged as estimated: the prompt as reserved (our
    count widened by the prompt margin: the server's count of a prompt is
    not ours, and only the reservation is sure to cover it) and our own count
    of the reply (at least 1, at most ``max_tokens``); the run's reason says so
    (:func:`~orchestra._core.run.estimate_note`). No
    reply: nothing, unless part of a streamed one had ``arrived`` (tokens, by
    our count) before it was cut: then the prompt as reserved and what arrived
    (at most ``max_tokens``).
    """
    run.reserve(-grant.pico, -1, -grant.tokens)
    if reply is None:
        return charge_partial(run, grant.prompt, grant.max_tokens, arrived) if arrived else Usage()
    prompt, completion = reply.prompt_tokens, reply.completion_tokens
    if not reply.usage_reported:
        prompt = grant.prompt
        completion = min(max(count_completion(reply.message), 1), grant.max_tokens)
        run.estimated += 1
    price = run.runner.pricing.price_of(run.state.model)
    usage = Usage(
        model_calls=1,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_pico=price.cost(prompt, completion, reply.cached_tokens, reply.cache_write_tokens),
        cached_input_tokens=reply.cached_tokens,
        reasoning_tokens=reply.reasoning_tokens,
        cache_write_tokens=reply.cache_write_tokens,
    )
    run.charge(usage)
    return usage


def charge_partial(run: LiveRun, prompt: int, cap: int, arrived: int) -> Usage:
    """Charge a call whose streamed reply was cut after ``arrived`` tokens (by our
    count, at most ``cap``): ``prompt`` (as reserved) and what arrived."""
    completion = min(arrived, cap)
    price = run.runner.pricing.price_of(run.state.model)
    usage = Usage(
        model_calls=1,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_pico=price.cost(prompt, completion),
    )
    run.charge(usage)
    return usage


def carve(
    parent: LiveRun, requested: Limits, now: float, keep: tuple[int, int] = (0, 0)
) -> Limits | str:
    """A child's limits: what it asks for, within what ``parent`` has left less
    ``keep`` (pico-dollars, tokens: the parent's own wind-down reserve); a child
    that asks for no wind-down reserve gets its parent's.

    Returns the child's limits, or the reason it cannot start.
    """
    limits = requested.anchored(now)
    if limits.wind_down_tokens is None:
        limits = attrs.evolve(limits, wind_down_tokens=parent.state.limits.wind_down_tokens)
    budget = parent.available_pico()
    if budget is not None:
        budget -= keep[0]
        if budget <= 0:
            return f"the parent run has no budget left (${to_usd(max(budget, 0)):.6f})"
        limits = attrs.evolve(limits, max_budget_usd=_least(to_usd(budget), limits.max_budget_usd))
    tokens = parent.available_tokens()
    if tokens is not None:
        tokens -= keep[1]
        if tokens <= 0:
            return f"the parent run has no tokens left ({max(tokens, 0)})"
        limits = attrs.evolve(limits, max_tokens_total=_least(tokens, limits.max_tokens_total))
    deadline = parent.state.limits.deadline
    if deadline is not None:
        limits = attrs.evolve(limits, deadline=_least(deadline, limits.deadline))
    return limits


def _least(parents: _N, asked: _N | None) -> _N:
    """The parent's remaining value, or the child's request if that is smaller."""
    return parents if asked is None else min(parents, asked)
