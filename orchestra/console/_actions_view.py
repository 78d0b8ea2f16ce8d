"""What can be done with a tree now, as forms: Stop while it runs; approve
(and continue at once) or reject the call it waits on; resume it once stopped
and decided. Each form
carries the session's token (see :mod:`orchestra.console._guard`)."""

from __future__ import annotations

import json
from typing import Any

from .._state import RunState, Status
from ._html import Child, Html, h
from ._launches import Launch
from ._page import LIMIT_EXITS, run_link, run_url
from ._reads import TreeSnapshot

__all__ = ["actions_html"]


def _form(action: str, root_id: str, token: str, *fields: Child, label: str, kind: str) -> Html:
    return h(
        "form",
        h("input", type="hidden", name="token", value=token),
        *fields,
        h("button", label, type="submit", class_=f"button {kind}", id=action),
        method="post",
        action=run_url(root_id, f"/{action}"),
        class_=f"action action-{action}",
    )


def actions_html(snap: TreeSnapshot, *, token: str, launch: Launch | None) -> Html:
    """The buttons for what can be done with the tree now, and how a resume started
    here went."""
    return h("div", _launched(launch, snap.root_state), _what_now(snap, token, launch))


def _what_now(snap: TreeSnapshot, token: str, launch: Launch | None) -> Html | None:
    """The buttons for what can be done with the tree now, if anything."""
    root = snap.root_state
    if _starting(launch, root):
        return None
    if root.status is Status.RUNNING:
        return _stop(snap, token)
    waiting = snap.waiting()
    if waiting is not None and waiting["decision"] == "waiting":
        return _decide(root.run_id, waiting, token)
    if root.status is Status.INTERRUPTED:
        return _resume(root, waiting, token)
    return _limit_note(root)


def _launched(launch: Launch | None, root: RunState) -> Html | None:
    if launch is None:
        return None
    if launch.running:
        if _starting(launch, root):
            return h("p", "starting the resume…", class_="launch")
        running = root.status is Status.RUNNING
        return h("p", "resumed from this console", class_="launch") if running else None
    if launch.failed:
        why = launch.said or f"exit code {launch.returncode}"
        return h("p", "the resume started here failed: ", why, class_="launch failed", role="alert")
    return None


def _starting(launch: Launch | None, root: RunState) -> bool:
    """Whether a resume started here has not yet saved the tree."""
    return launch is not None and launch.running and root.updated_at < launch.started_at


def _stop(snap: TreeSnapshot, token: str) -> Html:
    root = snap.root_state
    runs = len(snap.spent)
    what = f"Stop the tree ({runs} run{'' if runs == 1 else 's'})"
    stop = _form("stop", root.run_id, token, label=what, kind="danger")
    if snap.lease is not None:
        return stop
    said = "No process runs this tree any more (its process stopped): resume it, or stop it."
    resume = _form("resume", root.run_id, token, label="Resume", kind="go")
    return h("div", h("p", said), h("div", resume, stop, class_="row"))


def _decide(root_id: str, waiting: dict[str, Any], token: str) -> Html:
    if waiting.get("kind") == "budget_request":
        return _request(root_id, waiting, token)
    call = h(
        "p",
        h("code", waiting["tool"], class_="tool"),
        " ",
        h(
            "code",
            json.dumps(waiting["arguments"], sort_keys=True, ensure_ascii=False),
            class_="args",
        ),
        h(
            "span",
            f" call {waiting['call_id']} in run ",
            run_link(waiting["run_id"]),
            class_="where",
        ),
    )
    call_field = h("input", type="hidden", name="call_id", value=waiting["call_id"])
    reason = h(
        "input",
        type="text",
        name="reason",
        placeholder="why not (the model is told)",
        aria_label="reason for rejecting",
        maxlength="2000",
    )
    both = "Approve and continue"  # one step: approve, then resume the tree
    forms = h(
        "div",
        _form("approve-resume", root_id, token, call_field, label=both, kind="go"),
        _form("approve", root_id, token, call_field, label="Approve", kind="go"),
        _form("reject", root_id, token, call_field, reason, label="Reject", kind="danger"),
        class_="row",
    )
    heading = h("h2", "Waiting for a human")
    return h("div", heading, h("p", waiting["asked"], class_="asked"), call, forms, class_="decide")


def _request(root_id: str, waiting: dict[str, Any], token: str) -> Html:
    """A run's request for more (``on_limit="ask"``): grant what it asks for (USD,
    turns or tokens, filled in with what it needs), or refuse."""
    asked = waiting.get("arguments") or {}
    usd = asked.get("usd") or (0.0 if asked.get("turns") or asked.get("tokens") else None)
    usd = max(asked.get("estimate_usd") or 0.0, 1e-6) if usd is None else usd
    fields = [
        _amount("usd", f"{usd:.6f}" if usd else "", "USD to grant", "any"),
        _amount("turns", str(asked.get("turns") or ""), "Turns to grant", "1"),
        _amount("tokens", str(asked.get("tokens") or ""), "Tokens to grant", "1"),
    ]
    call_field = h("input", type="hidden", name="call_id", value=waiting["call_id"])
    forms = h(
        "div",
        _form("grant", root_id, token, *fields, label="Grant", kind="go"),
        _form("reject", root_id, token, call_field, label="Refuse", kind="danger"),
        class_="row",
    )
    where = h("p", f"request {waiting['call_id']} of run ", run_link(waiting["run_id"]))
    heading = h("h2", "Asks for more budget")
    return h(
        "div", heading, h("p", waiting["asked"], class_="asked"), where, forms, class_="decide"
    )


def _amount(name: str, value: str, label: str, step: str) -> Html:
    """A number field of the grant form (empty: none of that kind)."""
    return h("input", type="number", name=name, value=value, step=step, min="0", aria_label=label)


def _resume(root: RunState, waiting: dict[str, Any] | None, token: str) -> Html:
    if waiting is not None:
        said = f"Call {waiting['call_id']} ({waiting['tool']}) is {waiting['decision']}."
    else:
        said = "The tree is stopped and can go on where it stopped."
    return h(
        "div",
        h("p", said),
        _form("resume", root.run_id, token, label="Resume", kind="go"),
        class_="row",
    )


def _limit_note(root: RunState) -> Html | None:
    if root.status not in LIMIT_EXITS:
        return None
    return h(
        "p",
        "Stopped at a limit. To go on, raise it from a shell: ",
        h("code", f"orchestra resume {root.run_id} --max-budget USD"),
        class_="hint",
    )
