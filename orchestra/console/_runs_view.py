"""The recent runs as a table: status, agent, turns, own and tree cost, age."""

from __future__ import annotations

from .._state import InterruptionKind, RunState, Status
from .._views.text import budget_usd, one_line, usd
from ._html import Html, h
from ._live import seen
from ._page import age, page, run_link, section, status_pill
from ._tree_view import bar

__all__ = ["runs_html", "runs_page"]


def runs_html(states: list[RunState], now: float) -> Html:
    """One row per run, newest first (``now`` for the ages)."""
    if not states:
        return h(
            "p", "No runs in this store yet: start one, e.g. ", h("code", "orchestra demo plan")
        )
    head = h(
        "tr",
        h("th", "run"),
        h("th", "agent"),
        h("th", "status"),
        h("th", "turns", class_="num col-turns"),
        h("th", "own $", class_="num col-own"),
        h("th", "tree $", class_="col-tree"),
        h("th", "age", class_="num col-age"),
    )
    return h("table", h("thead", head), h("tbody", [_row(s, now) for s in states]), class_="runs")


def _row(state: RunState, now: float) -> Html:
    return h(
        "tr",
        h("td", run_link(state.run_id), class_="id"),
        h("td", state.agent, class_="agent"),
        h("td", status_pill(state.status), _why(state), class_="status"),
        h("td", str(state.turns), class_="num col-turns"),
        h("td", usd(state.own.cost_usd), class_="num col-own"),
        h("td", _tree_spend(state), class_="col-tree"),
        h("td", age(state.updated_at, now), class_="num col-age"),
        data_run=state.run_id,
        data_status=state.status.value,
    )


def _tree_spend(state: RunState) -> Html:
    """The tree's spend; against its budget as a bar, if it has one."""
    budget, spent = state.limits.max_budget_usd, state.tree.cost_usd
    if budget is None:
        return h("span", h("span", "tree ", class_="phone-only"), usd(spent))
    hit = state.status is Status.BUDGET_EXCEEDED
    return bar(f"{usd(spent)} of {budget_usd(budget)}", spent, budget, hit=hit, kind="usd")


def _why(state: RunState) -> Html | None:
    waiting = state.interruption
    if state.status is Status.INTERRUPTED and waiting is not None and waiting.kind.waits_for_human:
        what = "more budget" if waiting.kind is InterruptionKind.BUDGET_REQUEST else waiting.tool
        return h("div", f"waits for a human: {what}", class_="why waits")
    if state.status in (Status.RUNNING, Status.COMPLETED) or not state.reason:
        return None
    said = one_line(state.reason)
    return h("div", said, class_="why", title=said)


def runs_page(states: list[RunState], *, now: float, store: str, all_runs: bool) -> Html:
    """The page of recent runs (children too if ``all_runs``), updated live."""
    which = "all runs" if all_runs else "run trees"
    other = h(
        "a",
        "only run trees" if all_runs else "children too",
        href="/" if all_runs else "/?all=1",
        class_="toggle",
    )
    runs = runs_html(states, now)
    body = section(f"Recent {which}", runs, id="runs", note=other)
    live = f"/live?{'all=1&' if all_runs else ''}seen={seen({'runs': runs})}"
    return page(title="Runs", store=store, body=body, live=live)
