"""One run's page: its tree's summary, what can be done now, the tree, the
transcript of the run looked at and its events.

Each part is a region the live updates replace on its own
(:func:`run_parts`), so a reason being typed into the reject form survives
every update that does not change the form.
"""

from __future__ import annotations

from .._state import RunState, Usage
from .._views.text import (
    budget_usd,
    duration,
    shape_words,
    short_id,
    token_details,
    tokens,
    usd,
)
from ._actions_view import actions_html
from ._events_view import events_html
from ._html import Child, Html, h
from ._launches import Launch
from ._live import seen
from ._page import LIMIT_EXITS, page, run_link, run_url, section, status_pill
from ._reads import TreeSnapshot
from ._transcript_view import transcript_html
from ._tree_view import tree_html

__all__ = ["DONE", "EventsMemo", "run_page", "run_parts"]

DONE = {
    "stop": "Stop sent: the process running the tree stops every run in it.",
    "approve": "Approved. Resume the tree to run the call.",
    "reject": "Rejected. Resume the tree: the model is told why.",
    "resume": "Resume started, in a process of its own.",
    "approve-resume": "Approved; the resume that runs the call started, in a process of its own.",
    "grant": "Granted. Resume the tree: the run goes on with its raised limits.",
}
"""What the page says after each action (``?done=ACTION``)."""


def run_page(
    snap: TreeSnapshot,
    *,
    token: str,
    store: str,
    launch: Launch | None,
    notice: Child = None,
    error: str | None = None,
) -> Html:
    """The whole page; ``notice`` after an action that worked, ``error`` after one that did not."""
    parts = run_parts(snap, token=token, launch=launch)
    root = snap.root_state
    banner = h("div", error, class_="banner error", role="alert") if error else None
    said = h("div", notice, class_="banner ok") if notice and not error else None
    scripted = h("div", id="notice", role="status", aria_live="polite")  # the script's notices
    body = [
        h("div", parts["summary"], id="summary", class_="summary"),
        banner,
        said,
        scripted,
        h("div", parts["actions"], id="actions", class_="actions"),
        section("Run tree", parts["tree"], id="tree"),
        h(
            "div",
            section("Transcript", parts["transcript"], id="transcript", note=_whose(snap)),
            section("Events", parts["events"], id="events", note=_events_note(snap)),
            class_="run-grid",
        ),
    ]
    title = f"{root.agent} {short_id(root.run_id)}"
    live = run_url(snap.selected.run_id, f"/live?seen={seen(parts)}")
    return page(title=title, store=store, body=body, live=live)


class EventsMemo:
    """The events table of the last snapshot, made again only once events were added
    (the costliest region to render; a live page asks for it many times a second)."""

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._html = Html("")

    def __call__(self, snap: TreeSnapshot) -> Html:
        last = snap.events[-1] if snap.events else None
        key = (
            snap.selected.run_id,
            snap.event_count,
            last and last.get("at"),
            last and last["type"],
        )
        if key != self._key:
            self._key, self._html = key, events_html(snap.events, snap.event_count)
        return self._html


def run_parts(
    snap: TreeSnapshot, *, token: str, launch: Launch | None, events: EventsMemo | None = None
) -> dict[str, Html]:
    """The regions of the page that change while runs go on, by element id."""
    selected = snap.selected
    return {
        "summary": _summary(snap),
        "actions": actions_html(snap, token=token, launch=launch),
        "tree": tree_html(snap.root, selected.run_id, snap.spent, snap.live),
        "transcript": transcript_html(
            selected, snap.decisions.get(selected.run_id, []), snap.events
        ),
        "events": (events or EventsMemo())(snap),
    }


def _whose(snap: TreeSnapshot) -> Html:
    state = snap.selected
    return h("span", "of ", state.agent, " ", run_link(state.run_id), class_="whose")


def _events_note(snap: TreeSnapshot) -> str:
    whose = "the whole tree" if snap.selected.parent_id is None else "this run"
    return f"of {whose}, newest first"


# -- the summary --------------------------------------------------------------------------------


def _summary(snap: TreeSnapshot) -> Html:
    root = snap.root_state
    title = h(
        "h1",
        h("span", root.agent, class_="agent"),
        " ",
        h("span", root.run_id, class_="id"),
        " ",
        status_pill(root.status),
        h("span", LIMIT_EXITS[root.status], class_="badge") if root.status in LIMIT_EXITS else None,
    )
    reason = h("p", root.reason, class_="reason") if root.reason else None
    tree = snap.spent[root.run_id]
    facts = [
        _spent(root, tree),
        _calls(root, tree, len(snap.spent)),
        _shape(root),
        _ran(snap),
        _where(snap),
        _continues(root),
    ]
    return h("div", title, reason, h("ul", [h("li", f) for f in facts if f], class_="facts"))


def _continues(root: RunState) -> Html | None:
    """The run this one continues, and the conversation's first run."""
    if root.continues is None:
        return None
    return h(
        "span",
        "continues ",
        run_link(root.continues),
        " (conversation ",
        run_link(root.conversation),
        ")",
    )


def _spent(root: RunState, tree: Usage) -> str:
    said = f"spent {usd(tree.cost_usd)}"
    budget = root.limits.max_budget_usd
    if budget is not None:
        said += f" of {budget_usd(budget)}"
    said += f", {tokens(tree.tokens)} tokens"
    if root.limits.max_tokens_total is not None:
        said += f" of {tokens(root.limits.max_tokens_total)}"
    return said + token_details(tree.cached_input_tokens, tree.reasoning_tokens)


def _calls(root: RunState, tree: Usage, runs: int) -> str:
    """The tree's model calls, and the root's own against its turn limit (a run's own)."""
    calls = tree.model_calls
    said = f"{calls} model call{'' if calls == 1 else 's'} in {runs} run{'' if runs == 1 else 's'}"
    limit = root.limits.max_turns
    if limit is not None:
        said += f" (the root's own: {root.own.model_calls} of {limit})"
    return said


def _shape(root: RunState) -> str | None:
    """The limits on the tree's shape, if any are set."""
    said = shape_words(root.limits.shape())
    return f"tree shape: {said}" if said else None


def _ran(snap: TreeSnapshot) -> str | None:
    seconds = snap.root_state.elapsed_s
    return f"ran {duration(seconds * 1000)}" if seconds else None


def _where(snap: TreeSnapshot) -> Html | None:
    lease = snap.lease
    process = f"running in {lease}" if lease else None
    directory = h("span", "dir ", h("code", snap.directory)) if snap.directory else None
    if process and directory:
        return h("span", process, ", ", directory)
    return h("span", process) if process else directory
