"""A saved tree as one report: its results, what each process's events add
(per-turn prompt tokens, retries, the human decisions), and how long it ran.

The command line prints it (``show``, the end of ``demo``/``run``/``resume``),
prints it as JSON, and the web console draws it.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._events import EventRecord
from .._exceptions import RunNotFound
from .._money import to_usd
from .._redact import redact
from .._result import RunResult, child_order
from .._state import RunState, Status
from .._stores.contract import Store
from .._top_ups import answered_by_policy

__all__ = ["decisions", "report", "tree_result", "with_stored_children"]


def tree_result(states: list[RunState], root_id: str) -> RunResult:
    """A result tree from saved states (as ``store.tree`` returns them), each
    run's children in the order of the calls that started them."""
    by_parent: dict[str | None, list[RunState]] = {}
    for state in states:
        by_parent.setdefault(state.parent_id, []).append(state)

    def build(state: RunState) -> RunResult:
        kids = sorted(by_parent.get(state.run_id, []), key=child_order(state))
        return RunResult(state=state, children=tuple(build(k) for k in kids))

    root = next(s for s in states if s.run_id == root_id)
    return build(root)


def report(
    result: RunResult,
    store: Store,
    elapsed_ms: float | None,
    directory: str | None,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """The JSON report of a tree, with each run's ``model`` and what every
    process's events add: per-turn prompt tokens, model retries, calls answered from the transcript
    (``deduplicated_calls``), the human decision on each call that asked for one.

    Two times: ``run_elapsed_ms``, how long the root ran, summed over every
    process that ran it (a resume adds to it); ``command_elapsed_ms``
    (``elapsed_ms`` given here), how long this command took to run the tree,
    starting its provider and MCP servers included (None for ``show``).
    ``endpoint``: the base URL the tree's model calls went to (``orchestra run``;
    None for a demo's embedded server), redacted.
    """
    result = with_stored_children(result, store)
    events: dict[str, list[dict[str, Any]]] = {}
    for event in store.events(root_id=result.state.root_id):
        events.setdefault(event["run_id"], []).append(event)
    states = {r.run_id: r.state for r in result.walk()}

    def add(summary: dict[str, Any]) -> dict[str, Any]:
        own = events.get(summary["run_id"], [])
        summary["model"] = states[summary["run_id"]].model
        summary["per_turn_prompt_tokens"] = [
            int(e["prompt_tokens"]) for e in own if e["type"] == "turn"
        ]
        summary["model_retries"] = sum(e["type"] == "model_retry" for e in own)
        summary["deduplicated_calls"] = sum(bool(e.get("deduplicated")) for e in own)
        summary["decisions"] = decisions(states[summary["run_id"]], own)
        summary["children"] = [add(c) for c in summary["children"]]
        return summary

    out = add(result.summary())
    ran_s = max(result.state.elapsed_s, _ran_s(events.get(result.run_id, [])))
    out["command_elapsed_ms"] = None if elapsed_ms is None else round(elapsed_ms, 1)
    out["run_elapsed_ms"] = round(ran_s * 1000, 1)
    out["dir"] = directory
    out["endpoint"] = None if endpoint is None else redact(endpoint)
    out["conversation_cost_usd"] = _conversation_cost(result, store)
    parent = result.state.trace_context.get("traceparent", "")
    out["trace_id"] = parent.split("-")[1] if parent.count("-") == 3 else None
    return out


def _conversation_cost(result: RunResult, store: Store) -> float | None:
    """What the conversation spent up to this run (its runs' tree costs, following
    ``continues`` back); None for a run that continues none. A run missing from
    the store ends the sum there."""
    if result.state.continues is None:
        return None
    state: RunState | None = result.state
    total = 0
    while state is not None:
        total += state.tree.cost_pico
        state = _earlier(state, store)
    return round(to_usd(total), 9)


def _earlier(state: RunState, store: Store) -> RunState | None:
    """The run ``state`` continues, if there is one and the store has it."""
    if state.continues is None:
        return None
    try:
        return store.load(state.continues)
    except RunNotFound:
        return None


def with_stored_children(result: RunResult, store: Store) -> RunResult:
    """``result`` with the children it has in the store but not in memory: a
    resumed run's children that finished in an earlier process."""
    have = {child.run_id: child for child in result.children}
    kids = []
    for child_id in result.state.children.values():
        child = have.pop(child_id, None)
        if child is None:
            try:
                child = RunResult(state=store.load(child_id))
            except RunNotFound:  # bound to its call, but the process died before its first save
                continue
        kids.append(with_stored_children(child, store))
    kids += [with_stored_children(child, store) for child in have.values()]
    return attrs.evolve(result, children=tuple(kids))


def _ran_s(events: list[EventRecord]) -> float:
    """Seconds a run ran, from its ``run_started``/``run_stopped`` pairs (every
    process that ran it); a start with no stop (a crash) counts nothing."""
    total, started = 0.0, None
    for event in events:
        if event["type"] == "run_started":
            started = event["at"]
        elif event["type"] == "run_stopped" and started is not None:
            total += max(event["at"] - started, 0.0)
            started = None
    return total


def decisions(state: RunState, events: list[EventRecord]) -> list[dict[str, Any]]:
    """Each call of this run that waited for a human, and what was decided.

    ``decision`` is ``approved``, ``rejected``, ``waiting`` (nobody decided
    yet) or ``undecided`` (the run stopped otherwise); ``done`` says whether a
    resume has acted on it (the approved call started, the rejection was
    answered to the model). Then each answer of this run's top-up policy to a
    child's request for more: ``granted`` or ``passed on`` (to a person).
    """
    asked: dict[str, tuple[int, dict[str, Any]]] = {}
    for index, event in enumerate(events):
        waiting = event.get("interruption") if event["type"] == "run_stopped" else None
        if waiting is not None and _asks(waiting, state.run_id):
            asked.pop(waiting["call_id"], None)  # asked again: this is the latest
            asked[waiting["call_id"]] = (index, waiting)
    current = state.interruption.to_dict() if state.interruption else None
    if current is not None and _asks(current, state.run_id) and current["call_id"] not in asked:
        asked[current["call_id"]] = (len(events), current)
    found = [
        _decision(state, events, since, waiting)
        for since, waiting in asked.values()
        if not answered_by_policy(state, waiting["call_id"])  # its parent's line says so
    ]
    return found + [_policy_answer(e) for e in events if e["type"] == "top_up"]


def _policy_answer(event: EventRecord) -> dict[str, Any]:
    """This run's policy answering a child's request for more (a ``top_up`` event)."""
    granted = bool(event["granted"])
    return {
        "call_id": f"request of {event['child_id']}",
        "tool": "more budget",
        "arguments": {k: event[k] for k in ("usd", "turns", "tokens") if event.get(k)},
        "kind": "budget_request",
        "asked": "",
        "decision": "granted" if granted else "passed on",
        "reason": None if granted else event["reason"],
        "done": True,
    }


def _wanted(request: dict[str, Any]) -> dict[str, Any]:
    """What a pending request for more asks for (USD, turns or tokens) and its estimate."""
    return {**(request.get("arguments") or {}), "estimate_usd": request.get("estimate_usd")}


def _asks(interruption: dict[str, Any], run_id: str) -> bool:
    return (
        interruption.get("kind") in ("approval", "unknown_outcome", "budget_request")
        and interruption.get("run_id") == run_id
        and bool(interruption.get("call_id"))
    )


def _decision(
    state: RunState, events: list[EventRecord], since: int, waiting: dict[str, Any]
) -> dict[str, Any]:
    call_id = waiting["call_id"]
    later = [e for e in events[since:] if e.get("call_id") == call_id]
    started = any(e["type"] == "tool_start" for e in later)
    answered = any(e["type"] == "tool_result" and e.get("decided") for e in later)
    reason = None
    granted = [a.arguments for a in state.approvals if a.call_id == call_id]
    if waiting.get("kind") == "budget_request":  # a request for more, not a call
        waiting = {
            **waiting,
            "tool": "more budget",
            "arguments": granted[0] if granted else _wanted(waiting),
        }
        pending = state.interruption is not None and state.interruption.call_id == call_id
        answered = not pending  # the run went on with it (or ended by it)
        started = answered and bool(granted)
    if call_id in state.rejections:
        decision, done, reason = "rejected", answered, state.rejections[call_id] or None
    elif started or granted:
        decision, done = "approved", started
    else:
        now = state.interruption if state.status is Status.INTERRUPTED else None
        decision = "waiting" if now is not None and now.call_id == call_id else "undecided"
        done = False
    return {
        "call_id": call_id,
        "tool": waiting.get("tool"),
        "arguments": waiting.get("arguments"),
        "kind": waiting.get("kind"),
        "asked": waiting.get("reason", ""),
        "decision": decision,
        "reason": reason,
        "done": done,
    }
