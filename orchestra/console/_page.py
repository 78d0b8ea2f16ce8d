"""The frame of every console page, and the small pieces all pages use."""

from __future__ import annotations

import time
import urllib.parse

from .._state import Status
from .._views.text import short_id
from ._html import Child, Html, h, literal

__all__ = ["LIMIT_EXITS", "age", "page", "run_link", "run_url", "section", "status_pill"]

LIMIT_EXITS = {
    Status.BUDGET_EXCEEDED: "hit its budget",
    Status.MAX_TURNS_EXCEEDED: "hit its turn limit",
    Status.DEADLINE_EXCEEDED: "hit its deadline",
}
"""Statuses of a run stopped by one of its limits, in words for a badge."""


def page(*, title: str, store: str, body: Child, live: str | None = None) -> Html:
    """A whole page; with ``live``, the URL of the server-sent events that update it."""
    head = h(
        "head",
        h("meta", charset="utf-8"),
        h("meta", name="viewport", content="width=device-width, initial-scale=1"),
        h("title", title, " · Orchestra"),
        h("link", rel="icon", href="data:,"),
        h("link", rel="stylesheet", href="/static/console.css"),
        h("script", src="/static/console.js", defer=True),
    )
    top = h(
        "header",
        h("a", literal("Orchestra <span>console</span>"), href="/", class_="brand"),
        h("span", store, class_="store", title="the run store"),
        h("span", "live", class_="live-dot", title="updates as the runs change"),
        class_="top",
    )
    return Html(
        "<!doctype html>"
        + h("html", head, h("body", top, h("main", body), data_live=live), lang="en")
    )


def status_pill(status: Status | str) -> Html:
    """The status in its colour."""
    value = Status(status).value
    return h("span", value.replace("_", " "), class_=f"pill s-{value}")


def run_url(run_id: str, then: str = "") -> str:
    """The path of a run's page (``then``: of a page under it), the id quoted whole."""
    return f"/runs/{urllib.parse.quote(run_id, safe='')}{then}"


def run_link(run_id: str, *children: Child) -> Html:
    """A link to a run's page (its tree, looking at it)."""
    return h("a", *(children or (short_id(run_id),)), href=run_url(run_id))


def age(at: float, now: float | None = None) -> str:
    """How long ago ``at`` was: ``4s``, ``12m``, ``3h``, ``2d``."""
    seconds = max((time.time() if now is None else now) - at, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"


def section(title: str, body: Child, *, id: str, note: Child = None) -> Html:
    """A titled block of a page; ``id`` names the region live updates replace."""
    heading = h("h2", title, h("span", note, class_="note") if note else None)
    return h("section", heading, h("div", body, id=id), class_=f"panel panel-{id}")
