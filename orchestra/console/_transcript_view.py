"""A run's transcript for people: the task, each model turn with its tool calls,
each call with its result (or why it has none) and the human decision on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .._events import EventRecord
from .._state import RunState, Status
from ._html import Html, h
from ._page import run_link

__all__ = ["SHOWN_CHARS", "decision_words", "transcript_html"]

SHOWN_CHARS = 2000
"""The most characters of one message or result shown (the rest is counted)."""

_DECIDED = {
    ("approved", True): "approved by a human; it ran",
    ("approved", False): "approved by a human; it runs when the tree resumes",
    ("rejected", True): "rejected by a human; the model was told",
    ("rejected", False): "rejected by a human; the model is told when the tree resumes",
    ("waiting", False): "waits for a human to approve or reject it",
    ("undecided", False): "the run stopped before anyone decided",
}


def decision_words(decision: dict[str, Any]) -> str:
    """What was decided on a call that asked a human, in words."""
    said = _DECIDED.get((decision["decision"], decision["done"]), str(decision["decision"]))
    if decision.get("reason"):
        said += f" (reason: {decision['reason']})"
    return said


def transcript_html(
    state: RunState, decisions: list[dict[str, Any]], events: list[EventRecord]
) -> Html:
    """The transcript of ``state``; ``events`` (of any runs) say which tool calls failed."""
    failed = {
        e.get("call_id")
        for e in events
        if e["run_id"] == state.run_id and e["type"] == "tool_result" and e.get("ok") is False
    }
    decided = {d["call_id"]: d for d in decisions}
    return h("ol", list(_entries(state, decided, failed)), class_="transcript")


def _entries(
    state: RunState, decided: dict[str, dict[str, Any]], failed: set[Any]
) -> Iterator[Html]:
    results = {
        m.get("tool_call_id"): m.get("content") for m in state.messages if m["role"] == "tool"
    }
    turn = 0
    for message in state.messages:
        role = message.get("role")
        if role == "system":
            yield _message("instructions", message.get("content"), "system", folded=True)
        elif role == "user":
            yield _message("task", message.get("content"), "user")
        elif role == "assistant":
            turn += 1
            calls = [
                _call(state, call, results, decided.get(call.get("id", "")), failed)
                for call in message.get("tool_calls") or ()
            ]
            yield _message(f"model, turn {turn}", message.get("content"), "assistant", calls)
    if state.status.terminal and state.status is not Status.COMPLETED:
        said = f"{state.status.value}: {state.reason or state.error or 'no reason given'}"
        yield _message("stopped", said, "end")


def _message(
    who: str, content: Any, role: str, calls: list[Html] | None = None, *, folded: bool = False
) -> Html:
    body = h("div", _cut(str(content)), class_="body") if content else None
    if folded:
        return h("li", h("details", h("summary", who), body), class_=f"msg {role}")
    return h("li", h("div", who, class_="who"), body, *(calls or ()), class_=f"msg {role}")


def _call(
    state: RunState,
    call: dict[str, Any],
    results: dict[Any, Any],
    decision: dict[str, Any] | None,
    failed: set[Any],
) -> Html:
    call_id = str(call.get("id", ""))
    function = call.get("function") or {}
    result = results.get(call_id, state.results.get(call_id))
    child = state.children.get(call_id)
    signature = h(
        "div",
        h("code", function.get("name", "?"), class_="tool"),
        " ",
        h("code", _arguments(function.get("arguments")), class_="args"),
        h("span", call_id, class_="call-id"),
        class_="sig",
    )
    return h(
        "div",
        signature,
        h("div", decision_words(decision), class_=f"decision d-{decision['decision']}")
        if decision
        else None,
        h("div", "child run ", run_link(child), class_="child") if child else None,
        _result(state, call_id, result, call_id in failed),
        class_="call",
    )


def _result(state: RunState, call_id: str, result: Any, failed: bool) -> Html:
    if result is not None:
        kind = "result error" if failed else "result"
        return h("pre", _cut(str(result)), class_=kind)
    if state.status is Status.RUNNING:
        said = "running…" if call_id in state.started else "about to run"
    else:
        said = "no result: the run stopped first"
    return h("div", said, class_="result pending")


def _arguments(raw: Any) -> str:
    """Tool arguments as compact JSON (as written if they are not JSON)."""
    if not isinstance(raw, str):
        return json.dumps(raw, sort_keys=True)
    try:
        return json.dumps(json.loads(raw), sort_keys=True, ensure_ascii=False)
    except ValueError:
        return raw


def _cut(content: str) -> Html:
    if len(content) <= SHOWN_CHARS:
        return h("span", content)
    more = len(content) - SHOWN_CHARS
    return h("span", content[:SHOWN_CHARS], h("em", f"… ({more:,} more characters)"))
