"""A run's events as a table, newest first, each said in a few words."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .._events import EventRecord
from .._views.text import cut, short_id, usd
from ._html import Html, h, join

__all__ = ["event_words", "events_html"]

_COMMON = frozenset({"type", "run_id", "root_id", "parent_id", "at"})


def events_html(events: list[EventRecord], total: int) -> Html:
    """The events, newest first, and how many older ones are not shown."""
    if not events:
        return h("p", "no events yet", class_="empty")
    older = total - len(events)
    head = h("tr", h("th", "at"), h("th", "run"), h("th", "event"), h("th", "details"))
    rows = [_row(event) for event in reversed(events)]
    table = h("table", h("thead", head), h("tbody", rows), class_="events")
    return join(
        [table, h("p", f"{older:,} older events not shown", class_="more") if older else None]
    )


def _row(event: dict[str, Any]) -> Html:
    at = float(event.get("at", 0.0))
    clock = time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"
    return h(
        "tr",
        h("td", clock, class_="at"),
        h("td", short_id(str(event.get("run_id", ""))), class_="run"),
        h("td", str(event.get("type", "")), class_="type"),
        h("td", event_words(event), class_="details"),
        class_=f"e-{event.get('type', '')}",
    )


def event_words(event: dict[str, Any]) -> str:
    """The event's own fields in words (known types), else as ``key=value`` pairs."""
    say = _SAYINGS.get(str(event.get("type")))
    if say is not None:
        try:
            return say(event)
        except (KeyError, TypeError, ValueError):
            pass  # an event of another shape: its fields as they are
    rest = {k: v for k, v in event.items() if k not in _COMMON}
    return cut(" ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in rest.items()), 300)


def _started(e: dict[str, Any]) -> str:
    return f"{e['agent']} {'resumed' if e.get('resumed') else 'started'}"


def _request(e: dict[str, Any]) -> str:
    return f"turn {e['turn']}: asks the model ({e['prompt_tokens']:,} prompt tokens)"


def _turn(e: dict[str, Any]) -> str:
    calls = e.get("tool_calls") or []
    then = f"calls {', '.join(calls)}" if calls else "answers"
    spent = f"{e['prompt_tokens']:,}+{e['completion_tokens']:,} tokens, {usd(e['call_cost_usd'])}"
    return f"turn {e['turn']}: {spent}; {then}"


def _tool_start(e: dict[str, Any]) -> str:
    return cut(f"{e['tool']} {json.dumps(e.get('args', {}), sort_keys=True)}", 300)


def _tool_result(e: dict[str, Any]) -> str:
    how = "ok" if e.get("ok") else "error"
    return f"{e['tool']}: {how} in {e['ms']:g} ms" + (
        " (decided by a human)" if e.get("decided") else ""
    )


def _approval(e: dict[str, Any]) -> str:
    call = f"{e['tool']} {json.dumps(e.get('args', {}), sort_keys=True)}"
    return cut(f"{call} waits for a human ({e['call_id']})", 300)


def _stopped(e: dict[str, Any]) -> str:
    reason = f" ({e['reason']})" if e.get("reason") else ""
    return cut(f"{e['status']}{reason} after {e['turns']} turns, {usd(e['tree_cost_usd'])}", 300)


_SAYINGS: dict[str, Callable[[dict[str, Any]], str]] = {
    "run_started": _started,
    "model_request": _request,
    "turn": _turn,
    "tool_start": _tool_start,
    "tool_result": _tool_result,
    "run_stopped": _stopped,
    "approval_required": _approval,
}
