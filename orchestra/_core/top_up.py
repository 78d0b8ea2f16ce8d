"""A run that asks at its limit: the budget request, and the grants that answer it.

A run whose limits say ``on_limit="ask"`` (set on the root, inherited by its
children unless they say otherwise) does not stop at its turn limit or a
budget (its own, or an ancestor's that binds it). It pauses ``interrupted``
with a ``budget_request``, an interruption a person decides as an approval:

- its ``call_id`` is the request's id, ``limit-<turns>-<raises>``: deciding is
  compare-and-swap on it (two equal grants of one request apply once);
- ``estimate_usd``: what it would need to finish, judged from its calls so
  far (:data:`ESTIMATE_CALLS` more at their average cost);
- ``arguments``: the grant that would let it finish (:func:`wanted_grant`),
  ``{"turns": 3}`` at its turn limit, ``{"usd": …}`` or ``{"tokens": …}`` at a
  budget: what ``orchestra grant`` is told to give (USD alone adds no turns);
- ``partial``: its answer so far, what its tools returned, kept out of its
  transcript (the run goes on from where it stopped if granted).

Its ancestors pause with it: the request surfaces at the root, as an approval
does, unless the parent's :class:`~orchestra.TopUps` policy grants it first
(:func:`answered_by_parent`). A grant (:func:`~orchestra._top_ups.grant_into`)
raises the run's limits, recorded as a :class:`~orchestra.LimitRaise`; a grant
to a child must fit in what each ancestor's budget has left
(:func:`~orchestra._top_ups.shortfall`). A refused
request (``reject``) ends the run at its next try with its limit's status and
its answer so far handed back.
"""

from __future__ import annotations

import attrs

from .._money import from_usd, to_usd
from .._state import Interruption, InterruptionKind, RunState, Status
from .._top_ups import POLICY_NOTE, TopUp, grant_into, request_id, shortfall
from .run import Exit, LiveRun
from .wind_down import findings, hand_back

__all__ = ["ESTIMATE_CALLS", "answered_by_parent", "stop_at_limit", "wanted_grant"]

ESTIMATE_CALLS = 3
"""A request's estimate: this many more calls at the run's average cost so far."""
_LIMIT_STOPS = frozenset({Status.BUDGET_EXCEEDED, Status.MAX_TURNS_EXCEEDED})


def stop_at_limit(run: LiveRun, stop: Exit) -> None:
    """End the run with ``stop``; or, if it is a limit's and the run asks at its
    limits, pause it with a budget request (a refused one ends it with ``stop``
    and its answer so far handed back)."""
    state = run.state
    if stop.status not in _LIMIT_STOPS or not state.limits.asks:
        run.finish(stop)
        return
    asked = request_id(state)
    refused = state.rejections.get(asked)
    if refused is not None:
        why = f"{stop.reason}; more was refused" + (f" ({refused})" if refused else "")
        hand_back(run, attrs.evolve(stop, reason=why))
        return
    estimate = _estimate_usd(state)
    wanted = wanted_grant(state, stop.status, estimate)
    costs = "" if wanted.usd else f" (about ${estimate:.6f})"
    reason = (
        f"{stop.reason}; asks for more: {wanted.describe()} to finish{costs}, "
        f"${to_usd(state.tree.cost_pico):.6f} spent"
    )
    request = Interruption(
        kind=InterruptionKind.BUDGET_REQUEST,
        reason=reason,
        run_id=state.run_id,
        call_id=asked,
        arguments={k: v for k, v in wanted.as_arguments().items() if v},
        estimate_usd=estimate,
        partial=findings(state.messages, stop),
    )
    run.finish(Exit(status=Status.INTERRUPTED, reason=reason, interruption=request))


def _estimate_usd(state: RunState) -> float:
    """:data:`ESTIMATE_CALLS` more calls at the run's average cost per call so far
    (its own calls and its children's: the tree's)."""
    calls = max(state.tree.model_calls, 1)
    return round(to_usd(state.tree.cost_pico) / calls * ESTIMATE_CALLS, 6)


def wanted_grant(state: RunState, status: Status, estimate_usd: float) -> TopUp:
    """The grant that would let the run finish, judged from its calls so far.

    :data:`ESTIMATE_CALLS` more calls: their turns at the turn limit, and the
    USD (``estimate_usd``) or tokens they would take past a budget of the run's
    own. A budget stop that none of its own explains (an ancestor's budget
    binds, or the next call's reservation is more than an average call) asks
    for USD.
    """
    spent = state.tree
    turns = ESTIMATE_CALLS if status is Status.MAX_TURNS_EXCEEDED else 0
    more_usd = max(estimate_usd, 1e-6)
    over_usd = _overrun(state.limits.budget_pico, spent.cost_pico, from_usd(more_usd))
    more_tokens = -(-spent.tokens // max(spent.model_calls, 1)) * ESTIMATE_CALLS
    over_tokens = _overrun(state.limits.max_tokens_total, spent.tokens, more_tokens)
    usd = more_usd if over_usd else 0.0
    tokens = more_tokens if over_tokens else 0
    if not (turns or usd or tokens):
        usd = more_usd
    return TopUp(usd=usd, turns=turns, tokens=tokens)


def _overrun(limit: int | None, spent: int, more: int) -> bool:
    """Whether ``more`` on top of ``spent`` goes past ``limit`` (None: no limit)."""
    return limit is not None and spent + more > limit


def answered_by_parent(parent: LiveRun, child: LiveRun) -> bool:
    """Let ``parent``'s :class:`~orchestra.TopUps` answer ``child``'s request, if
    it made one; whether it granted it (the child is then to run again).

    Each answer is a ``top_up`` event of the parent: granted, or passed on to a
    person (with why)."""
    waiting = child.state.interruption
    policy = parent.agent.top_ups
    if (
        policy is None
        or child.state.status is not Status.INTERRUPTED
        or waiting is None
        or waiting.kind is not InterruptionKind.BUDGET_REQUEST
        or waiting.run_id != child.state.run_id
    ):
        return False
    granted = sum(r.note == POLICY_NOTE for r in child.state.limit_raises)
    answer = policy.answer(parent.state, child.state, granted)
    if isinstance(answer, TopUp):
        answer = _fitted(parent, answer)
    if isinstance(answer, str):
        parent.emit("top_up", child_id=child.state.run_id, granted=False, reason=answer)
        return False
    grant_into(child.state, answer, POLICY_NOTE, parent.runner.now())
    parent.emit(
        "top_up",
        child_id=child.state.run_id,
        granted=True,
        reason=answer.describe(),
        **answer.as_arguments(),
    )
    child.checkpoint()
    return True


def _fitted(parent: LiveRun, grant: TopUp) -> TopUp | str:
    """``grant`` if it fits in what the parent's lineage has left, else why not."""
    short = shortfall([node.state for node in parent.lineage()], grant)
    return grant if short is None else short
