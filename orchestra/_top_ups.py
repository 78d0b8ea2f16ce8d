"""Top-ups: more turns or budget for a run that asked, by a person or by its parent.

A run whose limits say ``on_limit="ask"`` does not stop at its turn limit or a
budget: it pauses, ``interrupted`` with a ``budget_request`` (see
:mod:`orchestra._core.top_up`). A :class:`TopUp` answers it:
:meth:`Runner.grant` (``orchestra grant``) for a person, or the parent's
:class:`TopUps` policy, which answers its children's requests before a person
is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._exceptions import ConfigError
from ._money import from_usd, to_usd
from ._state import LimitRaise, Limits, RunState

__all__ = [
    "POLICY_NOTE",
    "TopUp",
    "TopUps",
    "answered_by_policy",
    "grant_into",
    "request_id",
    "shortfall",
]

POLICY_NOTE = "top-up from the parent's policy"
"""How a raise granted by a parent's policy is noted (and counted)."""


def _not_negative(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class TopUp:
    """What a grant adds to a run's limits: USD to its budget, turns to its turn
    limit, tokens to its token budget (each on top of what it has now)."""

    usd: float = attrs.field(default=0.0, validator=_not_negative)
    turns: int = attrs.field(default=0, validator=_not_negative)
    tokens: int = attrs.field(default=0, validator=_not_negative)

    def __attrs_post_init__(self) -> None:
        if not (self.usd or self.turns or self.tokens):
            raise ConfigError("a top-up grants something: usd, turns or tokens")

    def as_arguments(self) -> dict[str, float]:
        """The grant as the decision recorded on the request (compare-and-swap)."""
        return {"usd": self.usd, "turns": self.turns, "tokens": self.tokens}

    def describe(self) -> str:
        """``$0.01 and 2 turns``."""
        parts = [f"${self.usd:.6g}"] if self.usd else []
        parts += [f"{self.turns} turn{'s' * (self.turns != 1)}"] if self.turns else []
        parts += [f"{self.tokens} tokens"] if self.tokens else []
        return " and ".join(parts)


Decide = Callable[[RunState, RunState], TopUp | None]
"""A parent's own rule: (parent state, child state asking) → a grant, or None to
ask a person."""


@attrs.frozen(kw_only=True)
class TopUps:
    """How a parent answers its children's requests for more (``on_limit="ask"``)
    before a person is asked: each request gets :attr:`grant`, at most
    :attr:`times` times per child, and only while the parent's own budget keeps
    :attr:`keep_usd` after it; a request past these goes to a person. ``decide``
    replaces the rules with a function of its own.

    Each answer is an event of the parent (``top_up``: granted, or passed on).
    """

    grant: TopUp | None = None
    times: int = attrs.field(default=1, validator=_not_negative)
    keep_usd: float = attrs.field(default=0.0, validator=_not_negative)
    decide: Decide | None = attrs.field(default=None, eq=False)

    def answer(self, parent: RunState, child: RunState, granted: int) -> TopUp | str:
        """The grant for ``child``'s request (``granted``: how many it had from this
        policy before), or why a person is asked instead."""
        if self.decide is not None:
            found = self.decide(parent, child)
            return found if found is not None else "the parent's rule passed it on"
        if self.grant is None:
            return "the parent grants nothing itself"
        if granted >= self.times:
            return f"the parent granted it {granted} time(s) already (its most)"
        left = parent.limits.budget_pico
        if left is not None and self.grant.usd:
            after = to_usd(left - parent.tree.cost_pico) - self.grant.usd
            if after < self.keep_usd:
                return f"the parent would keep ${max(after, 0):.6f}, under its ${self.keep_usd:g}"
        return self.grant


def request_id(state: RunState) -> str:
    """The id of the request a run at its limit makes now, ``limit-<turns>-<raises>``
    (changes with each turn and each raise of its limits)."""
    return f"limit-{state.turns}-{len(state.limit_raises)}"


def answered_by_policy(state: RunState, asked: str) -> bool:
    """Whether ``state``'s request ``asked`` (a :func:`request_id`) was granted by
    its parent's policy (the raise that followed it says so)."""
    raises = asked.rpartition("-")[2]
    if not raises.isdigit() or int(raises) >= len(state.limit_raises):
        return False
    return state.limit_raises[int(raises)].note == POLICY_NOTE


def grant_into(state: RunState, grant: TopUp, note: str, now: float) -> None:
    """Raise ``state``'s limits by ``grant``, recorded as a raise (its status is
    left as it is: the run goes on when it is next resumed)."""
    before = state.limits
    after = attrs.evolve(
        before,
        max_budget_usd=_more(before.max_budget_usd, grant.usd),
        max_turns=_more_int(before.max_turns, grant.turns),
        max_tokens_total=_more_int(before.max_tokens_total, grant.tokens),
    )
    state.limit_raises.append(LimitRaise(at=now, before=before, after=after, note=note))
    state.limits = after


def _more(limit: float | None, usd: float) -> float | None:
    return None if limit is None else round(limit + usd, 12)


def _more_int(limit: int | None, more: int) -> int | None:
    return None if limit is None else limit + more


def shortfall(ancestors: list[RunState], grant: TopUp) -> str | None:
    """Why ``grant`` does not fit in what ``ancestors`` have left of their
    budgets (None: it fits). A root's grant comes from the person who grants."""
    needed = from_usd(grant.usd)
    for ancestor in ancestors:
        limit: Limits = ancestor.limits
        budget = limit.budget_pico
        if budget is None or not needed:
            continue
        left = budget - ancestor.tree.cost_pico
        if left < needed:
            return (
                f"{ancestor.agent} run {ancestor.run_id} has ${to_usd(max(left, 0)):.6f} left "
                f"of its ${limit.max_budget_usd:g} budget, less than the ${grant.usd:g} asked; "
                "grant it (or its root) more first, or grant less"
            )
    return None
