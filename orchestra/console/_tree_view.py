"""A run tree as nested HTML: one row per run, its spend against its limits as bars.

Each row says the run's status, its own turns and spend, and its tree's spend
against its budget (and model calls against its turn limit) as bars that turn
amber near the limit and red at it. A run stopped by a limit is marked on its
row (a badge, a red edge), so the child that hit its budget shows without
opening anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._result import RunResult
from .._state import RunState, Status, Usage
from .._views.text import budget_usd, one_line, short_id, tokens, usd
from ._html import Html, h
from ._page import LIMIT_EXITS, run_url, status_pill

__all__ = ["bar", "doing", "tree_html"]

STREAMING_SHOWN = 160
"""Characters of a run's streaming text shown under its row (its latest)."""
HIGH = 0.8
"""From this share of a limit on, a bar is amber."""


def tree_html(
    root: RunResult,
    selected: str,
    spent: Mapping[str, Usage],
    live: Mapping[str, str] | None = None,
) -> Html:
    """The whole tree, the row of run ``selected`` highlighted; ``spent``: each run's
    tree usage by run id (its saved one if missing); ``live``: what running runs are
    streaming now, by run id."""
    return h("ul", _branch(root, selected, spent, live or {}), class_="tree")


def _branch(
    result: RunResult, selected: str, spent: Mapping[str, Usage], live: Mapping[str, str]
) -> Html:
    kids = [_branch(child, selected, spent, live) for child in result.children]
    state = result.state
    row = _row(state, selected, spent.get(result.run_id, state.tree), live.get(state.run_id))
    return h("li", row, h("ul", kids) if kids else None)


def _row(state: RunState, selected: str, tree: Usage, streaming: str | None = None) -> Html:
    status = state.status
    classes = ["node", f"s-{status.value}"]
    if status in LIMIT_EXITS or status is Status.FAILED:
        classes.append("stopped-hard")
    if state.run_id == selected:
        classes.append("selected")
    return h(
        "div",
        _name(state),
        h("span", status_pill(status), _badge(status), class_="state"),
        h("span", _figures(state), class_="figures"),
        h("div", *_meters(state, tree), class_="meters"),
        _note(state, streaming),
        class_=" ".join(classes),
        data_run=state.run_id,
        data_status=status.value,
    )


def _name(state: RunState) -> Html:
    return h(
        "a",
        h("span", state.agent, class_="agent"),
        " ",
        h("span", short_id(state.run_id), class_="id"),
        href=run_url(state.run_id),
        class_="name",
        title=state.run_id,
    )


def _figures(state: RunState) -> str:
    """Its own turns and spend (the bars say its tree's)."""
    turns = state.turns
    return f"{turns} turn{'' if turns == 1 else 's'} · own {usd(state.own.cost_usd)}"


def _badge(status: Status) -> Html | None:
    said = LIMIT_EXITS.get(status)
    return h("span", said, class_="badge") if said else None


def _meters(state: RunState, tree: Usage) -> list[Html]:
    limits = state.limits
    status = state.status
    spent = f"{usd(tree.cost_usd)}"
    meters = [
        bar(
            spent
            if limits.max_budget_usd is None
            else f"{spent} of {budget_usd(limits.max_budget_usd)}",
            tree.cost_usd,
            limits.max_budget_usd,
            hit=status is Status.BUDGET_EXCEEDED,
            kind="usd",
        )
    ]
    if limits.max_tokens_total is not None:
        used = f"{tokens(tree.tokens)} of {tokens(limits.max_tokens_total)} tokens"
        hit = status is Status.BUDGET_EXCEEDED and "token" in state.reason
        meters.append(bar(used, tree.tokens, limits.max_tokens_total, hit=hit, kind="tokens"))
    if limits.max_turns is not None:
        calls = f"{tree.model_calls} of {limits.max_turns} calls"
        hit = status is Status.MAX_TURNS_EXCEEDED
        meters.append(bar(calls, tree.model_calls, limits.max_turns, hit=hit, kind="turns"))
    return meters


def bar(label: str, used: float, limit: float | None, *, hit: bool, kind: str) -> Html:
    """``label`` over a bar filled to ``used`` of ``limit`` (none without a limit):
    amber from :data:`HIGH` of it, red once ``hit``."""
    share = _share(used, limit)
    level = "free" if limit is None else "hit" if hit else "high" if share >= HIGH else "ok"
    svg = h(
        "svg",
        h("rect", width="100", height="4", class_="track"),
        h("rect", width=f"{share * 100:.1f}", height="4", class_="fill") if share else None,
        viewBox="0 0 100 4",
        preserveAspectRatio="none",
        class_="bar",
        aria_hidden="true",
    )
    if limit is None:
        label += " · no budget" if kind == "usd" else " · no limit"
    return h("div", svg, h("span", label, class_="what"), class_=f"meter m-{kind} {level}")


def _share(used: float, limit: float | None) -> float:
    """How much of ``limit`` ``used`` is, between 0 and 1 (0 without a limit)."""
    if limit is None:
        return 0.0
    return 1.0 if limit <= 0 else min(max(used / limit, 0.0), 1.0)


def _note(state: RunState, streaming: str | None = None) -> Html | None:
    """One line under the row: why it stopped, its answer, or what it does now (the
    text it is streaming, its latest words, while it writes a reply)."""
    if state.status is Status.RUNNING and streaming:
        said = one_line(streaming)
        shown = "…" + said[-STREAMING_SHOWN:] if len(said) > STREAMING_SHOWN else said
        return h("div", shown, class_="note streaming", title=said)
    if state.status is Status.RUNNING:
        said, kind = doing(state), "doing"
    elif state.status is Status.COMPLETED:
        said, kind = state.answer or state.reason, "answer"
    elif state.answer_partial and state.answer:
        said, kind = f"partial answer: {state.answer} ({state.reason})", "answer partial"
    else:
        said, kind = state.reason or state.error or "", "why"
    said = one_line(said or "")
    return h("div", said, class_=f"note {kind}", title=said) if said else None


def doing(state: RunState) -> str:
    """What a running run waits on: its tools in flight, or the model."""
    done = set(state.results) | {m.get("tool_call_id") for m in state.messages}
    last = state.messages[-1] if state.messages else {}
    calls = [c for c in last.get("tool_calls") or () if c.get("id") not in done]
    if last.get("role") == "assistant" and calls:
        names = sorted({str(c.get("function", {}).get("name", "?")) for c in calls})
        return f"running {', '.join(names)}" + (f" ({len(calls)} calls)" if len(calls) > 1 else "")
    return "waiting for the model"
