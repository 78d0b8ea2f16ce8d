"""The console's routes: pages, their live streams, the actions and two static files.

=======================  ====  ===============================================
``/``                    GET   recent run trees (``?all=1``: children too)
``/live``                GET   its live updates (server-sent events)
``/runs/ID``             GET   the tree of run ID, looking at that run
``/runs/ID/live``        GET   its live updates
``/runs/ROOT/ACTION``    POST  ``stop``, ``approve``, ``reject``, ``grant``, ``resume``,
                               ``approve-resume`` (approve, then resume)
``/static/NAME``         GET   ``console.css``, ``console.js``
=======================  ====  ===============================================

An action answers with a redirect to the run's page (``?done=ACTION`` says
what was done), or, if it cannot be done, that page with the reason (409).
The page's script posts the same forms with ``fetch`` instead (no reload:
the live updates show the effect) and gets JSON.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp

from .._exceptions import ConfigError, OrchestraError, RunNotFound
from .._redact import redact
from .._stores.contract import DurableStore
from . import _actions
from ._guard import Guard, Sessions
from ._html import Html, h
from ._launches import Launches
from ._live import parse_seen, updates
from ._page import page, run_url
from ._reads import TreeSnapshot, read_runs, read_tree
from ._run_view import DONE, EventsMemo, run_page, run_parts
from ._runs_view import runs_html, runs_page

__all__ = ["Console", "build_app"]

RUNS_SHOWN = 50
"""Runs on the runs page."""
MAX_FORM_BYTES = 16_384
"""The largest action form accepted (a reason is at most 2,000 characters)."""

STATIC = {"console.css": "text/css", "console.js": "text/javascript"}

T = TypeVar("T")


class Console:
    """The console's state: the store it shows, its sessions, the resumes it started."""

    def __init__(
        self, *, store: DurableStore, port: int, launches: Launches, closing: trio.Event
    ) -> None:
        self.store = store
        self.port = port
        self.launches = launches
        self.closing = closing
        """Set when the server stops: the live streams end."""
        self.sessions = Sessions(port=port)
        self.static = {name: _static(name) for name in STATIC}

    @property
    def store_name(self) -> str:
        """The store as the page shows it (a database URL without its password)."""
        return self.store.shown

    async def read(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``fn(store, *args, **kw)`` in a worker thread (the store is synchronous)."""
        return await trio.to_thread.run_sync(lambda: fn(self.store, *args, **kw))

    def respond(
        self, request: Request, render: Callable[[str], Html], status: int = 200
    ) -> Response:
        """The page ``render(token)`` makes for the request's session (a new one gets a cookie)."""
        session, new = self.sessions.session(request)
        response = HTMLResponse(render(self.sessions.token(session)), status_code=status)
        if new:
            self.sessions.set_cookie(response, session)
        return response

    def token(self, request: Request) -> str:
        return self.sessions.token(self.sessions.session(request)[0])


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


# -- pages ----------------------------------------------------------------------------------------


async def _runs(request: Request) -> Response:
    console: Console = request.app.state.console
    all_runs = request.query_params.get("all") == "1"
    states = await console.read(read_runs, limit=RUNS_SHOWN, roots_only=not all_runs)
    html = runs_page(states, now=time.time(), store=console.store_name, all_runs=all_runs)
    return console.respond(request, lambda _token: html)


async def _runs_live(request: Request) -> Response:
    console: Console = request.app.state.console
    roots_only = request.query_params.get("all") != "1"

    def render() -> dict[str, str]:
        states = read_runs(console.store, limit=RUNS_SHOWN, roots_only=roots_only)
        return {"runs": runs_html(states, time.time())}

    return _stream(console, request, render)


async def _run(request: Request) -> Response:
    console: Console = request.app.state.console
    snap = await _snapshot(console, request.path_params["run_id"])
    if isinstance(snap, Response):
        return snap
    notice = DONE.get(request.query_params.get("done", ""))
    return _run_response(console, request, snap, notice=notice)


def _run_response(
    console: Console,
    request: Request,
    snap: TreeSnapshot,
    *,
    notice: str | None = None,
    error: str | None = None,
) -> Response:
    launch = console.launches.get(snap.root_state.run_id)

    def render(token: str) -> Html:
        store = console.store_name
        return run_page(snap, token=token, store=store, launch=launch, notice=notice, error=error)

    return console.respond(request, render, status=409 if error else 200)


async def _run_live(request: Request) -> Response:
    console: Console = request.app.state.console
    snap = await _snapshot(console, request.path_params["run_id"])
    if isinstance(snap, Response):
        return snap
    run_id, root_id, token = snap.selected.run_id, snap.root_state.run_id, console.token(request)
    events = EventsMemo()

    def render() -> dict[str, str]:
        launch = console.launches.get(root_id)
        fresh = read_tree(console.store, run_id)
        return dict(run_parts(fresh, token=token, launch=launch, events=events))

    return _stream(console, request, render)


async def _snapshot(console: Console, run_id: str) -> TreeSnapshot | Response:
    """The tree of ``run_id``, or the page saying there is no such run."""
    try:
        return await console.read(read_tree, run_id)
    except (RunNotFound, ConfigError) as exc:
        return _not_found(console, str(exc))


def _not_found(console: Console, said: str) -> Response:
    body = h("div", h("p", said, class_="banner error"), h("p", h("a", "all runs", href="/")))
    html = page(title="No such run", store=console.store_name, body=body)
    return HTMLResponse(html, status_code=404)


def _stream(console: Console, request: Request, render: Callable[[], dict[str, str]]) -> Response:
    headers = {"x-accel-buffering": "no"}
    shown = parse_seen(request.query_params.get("seen", ""))
    stream = updates(render, console.closing, shown)
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def _static_file(request: Request) -> Response:
    console: Console = request.app.state.console
    name = request.path_params["name"]
    if name not in STATIC:
        return Response("no such file", status_code=404, media_type="text/plain")
    headers = {"cache-control": "no-cache"}
    return Response(console.static[name], media_type=STATIC[name], headers=headers)


# -- actions --------------------------------------------------------------------------------------


REFUSED_FORM = "refused: this form is not from this console's page (reload the page and try again)"


async def _act(request: Request) -> Response:
    """An action: a redirect to the run's page, or (from the page's script, which says
    ``x-orchestra-fetch: 1``) JSON ``{"ok": ..., "said": ...}`` and the live updates."""
    console: Console = request.app.state.console
    action, run_id = request.path_params["action"], request.path_params["run_id"]
    scripted = request.headers.get("x-orchestra-fetch") == "1"
    if action not in DONE:
        return Response("no such action", status_code=404, media_type="text/plain")
    form = await _form(request)
    if form is None or not console.sessions.valid(request, form.get("token", "")):
        return _said(REFUSED_FORM, 403) if scripted else PlainTextResponse(REFUSED_FORM, 403)
    snap = await _snapshot(console, run_id)
    if isinstance(snap, Response):
        return snap
    root_id = snap.root_state.run_id
    try:
        await _do(console, action, root_id, form)
    except OrchestraError as exc:
        if scripted:
            return _said(f"{action}: {exc}", 409)
        fresh = await _snapshot(console, root_id)
        if isinstance(fresh, Response):
            return fresh
        return _run_response(console, request, fresh, error=f"{action}: {exc}")
    if scripted:
        return _said(DONE[action], 200)
    return RedirectResponse(run_url(root_id, f"?done={action}"), status_code=303)


def _said(said: str, status: int) -> Response:
    return JSONResponse({"ok": status == 200, "said": redact(said)}, status_code=status)


async def _form(request: Request) -> dict[str, str] | None:
    """The fields of an action's urlencoded form (the first of each), or None if too big."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    fields = urllib.parse.parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


async def _do(console: Console, action: str, root_id: str, form: dict[str, str]) -> None:
    call_id = form.get("call_id", "")
    if action == "stop":
        await console.read(_actions.stop_tree, root_id)
    elif action == "approve":
        await console.read(_actions.approve_call, root_id, call_id)
    elif action == "reject":
        await console.read(_actions.reject_call, root_id, call_id, form.get("reason", ""))
    elif action == "grant":
        amounts = (form.get(kind, "") for kind in ("usd", "turns", "tokens"))
        await console.read(_actions.grant_more, root_id, *amounts)
    elif action == "approve-resume":  # decide and continue in one step
        await console.read(_actions.check_resumable, root_id)  # else nothing is decided
        await console.read(_actions.approve_call, root_id, call_id)
        await _resume(console, root_id)
    else:
        await _resume(console, root_id)


async def _resume(console: Console, root_id: str) -> None:
    """Start ``orchestra resume ROOT_ID`` in a process of its own, if it can go on now."""
    await console.read(_actions.check_resumable, root_id)
    console.launches.start(root_id)


def build_app(console: Console) -> ASGIApp:
    """The console as an ASGI application (guarded: see :mod:`orchestra.console._guard`)."""
    routes = [
        Route("/", _runs),
        Route("/live", _runs_live),
        # A run id may hold "/" (a store is not trusted to hold only ours): the
        # pages under a run come first, so that only what is left is an id.
        Route("/runs/{run_id:path}/live", _run_live),
        Route("/runs/{run_id:path}/{action}", _act, methods=["POST"]),
        Route("/runs/{run_id:path}", _run),
        Route("/static/{name}", _static_file),
    ]
    app = Starlette(routes=routes)
    app.state.console = console
    return Guard(app, port=console.port)
