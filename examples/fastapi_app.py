"""Claim: a FastAPI service starts, streams, stops and approves Orchestra trees from asyncio.

``pip install -e '.[fastapi]'``, then ``uvicorn examples.fastapi_app:app`` (or
``python examples/fastapi_app.py`` to try it once on loopback and exit). The
app runs its trees with ``orchestra.aio`` on the server's own event loop,
against the embedded scripted provider (the ``plan``, ``research``,
``research_runaway``, ``slow_tree`` and ``destructive`` scenarios over a fresh
sandbox):

- ``POST /runs {"scenario": "research"}`` starts a tree; ``{"run_id": ...}``;
- ``GET /runs/{id}/events`` streams the tree's events as server-sent events
  (one ``data:`` line of JSON each, ending after the root stops; for a tree
  that has stopped, the events its runs recorded, then the end);
- ``GET /runs/{id}/agui`` streams the same tree as AG-UI events (the
  protocol's server-sent events, for agent front ends: its children as
  subagents; see ``orchestra.agui``);
- ``GET /runs/{id}`` is the tree's result once it stopped (404 before);
- ``POST /runs/{id}/cancel`` stops the whole tree; every run ``interrupted``;
- ``POST /runs/{id}/approve`` approves the call a run waits on and continues it;
- ``POST /runs/{id}/grant {"usd": 0.004}`` grants a run's request for more
  budget (a tree started with ``"on_limit": "ask"``) and continues it.

Run as a script, it serves on a free loopback port with uvicorn, starts a
20-run ``slow_tree``, cancels it while its children scan and prints how long
the whole tree took to stop; exits 1 unless every run ended ``interrupted``
within 200 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from orchestra import (
    Event,
    Limits,
    MemoryStore,
    OpenAIProvider,
    Runner,
    RunNotFound,
    StateError,
    agui,
    aio,
)
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox

SCENARIOS = ("plan", "research", "research_runaway", "slow_tree", "destructive")


class Start(BaseModel):
    scenario: str = "plan"
    children: int | None = None
    on_limit: Literal["stop", "ask"] = "stop"
    child_budget: float | None = Field(default=None, gt=0)


class Grant(BaseModel):
    usd: float = Field(gt=0)


class Service:
    """The runner, the sandbox and the trees this process started."""

    def __init__(self) -> None:
        self.box = make_sandbox(Path(tempfile.mkdtemp(prefix="orchestra-api-")) / "sandbox")
        provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
        self.runner = Runner(provider=provider, store=MemoryStore())
        self.trees: dict[str, tuple[aio.Handle, str]] = {}

    def handle(self, run_id: str) -> aio.Handle:
        if run_id not in self.trees:
            raise HTTPException(404, f"no run {run_id}")
        return self.trees[run_id][0]


CHILDREN = 19
service = Service()
app = FastAPI(title="Orchestra trees")


@app.post("/runs")
async def start(body: Start) -> dict[str, str]:
    if body.scenario not in SCENARIOS:
        raise HTTPException(422, f"scenario must be one of {', '.join(SCENARIOS)}")
    # the demo's limits (20 turns, children 8 turns and $0.05), asking at a limit if told
    limits = Limits(max_turns=20, on_limit=body.on_limit)
    children = Limits(max_turns=8, max_budget_usd=body.child_budget or 0.05)
    agent = demo_agent(body.scenario, service.box, limits=limits, child_limits=children)
    handle = await aio.start(service.runner, agent, demo_task(body.scenario, body.children))
    service.trees[handle.run_id] = (handle, body.scenario)
    return {"run_id": handle.run_id}


@app.get("/runs/{run_id}/events")
async def events(run_id: str) -> StreamingResponse:
    """The tree's events as they happen, ending when it stops; a tree that has
    stopped: the events its runs recorded (text deltas are not kept)."""
    handle = service.handle(run_id)

    async def lines() -> AsyncIterator[str]:
        if handle.done:
            for record in service.runner.store.events(root_id=run_id):
                yield f"data: {json.dumps(record)}\n\n"
            return
        async for event in handle.events():
            yield f"data: {json.dumps(event.to_dict())}\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream")


@app.get("/runs/{run_id}/agui")
async def agui_events(run_id: str) -> StreamingResponse:
    """The tree as an AG-UI event stream: live, ending when it stops; a tree that
    has stopped: from the events its runs recorded."""
    handle = service.handle(run_id)
    source = recorded(run_id) if handle.done else handle.events()
    return StreamingResponse(agui.sse(source), media_type=agui.MEDIA_TYPE)


async def recorded(run_id: str) -> AsyncIterator[Event]:
    """A stopped tree's recorded events, in the order they happened (the store
    keeps each run's in order, saved run by run)."""
    records = sorted(service.runner.store.events(root_id=run_id), key=lambda r: r["at"])
    for record in records:
        yield agui.event_of(record)


@app.get("/runs/{run_id}")
async def result(run_id: str) -> dict[str, Any]:
    handle = service.handle(run_id)
    if not handle.done:
        raise HTTPException(404, f"run {run_id} is still running")
    return (await handle.wait()).summary()


@app.post("/runs/{run_id}/cancel")
async def cancel(run_id: str) -> dict[str, Any]:
    handle = service.handle(run_id)
    handle.cancel("cancelled over HTTP")
    return (await handle.wait()).summary()


@app.post("/runs/{run_id}/approve")
async def approve(run_id: str) -> dict[str, Any]:
    return await decided(run_id, lambda: service.runner.approve(run_id))


@app.post("/runs/{run_id}/grant")
async def grant(run_id: str, body: Grant) -> dict[str, Any]:
    return await decided(run_id, lambda: service.runner.grant(run_id, usd=body.usd))


async def decided(run_id: str, decide: Callable[[], object]) -> dict[str, Any]:
    """Once the tree has stopped: ``decide`` (409 with why if it cannot), then
    continue the tree; its result."""
    handle, scenario = service.trees.get(run_id, (None, ""))
    if handle is None:
        raise HTTPException(404, f"no run {run_id}")
    await handle.wait()
    try:
        decide()
    except StateError as exc:
        raise HTTPException(409, str(exc)) from None
    resumed = await aio.resume(service.runner, run_id, demo_agent(scenario, service.box))
    service.trees[run_id] = (resumed, scenario)
    return (await resumed.wait()).summary()


def walk(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [summary, *(r for c in summary["children"] for r in walk(c))]


@contextlib.asynccontextmanager
async def served(port: int) -> AsyncIterator[Any]:
    """The app under uvicorn on loopback ``port``; an httpx client of it."""
    import httpx
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:  # noqa: ASYNC110 (uvicorn sets a flag; it has no event)
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield client
    finally:
        server.should_exit = True
        await serving


async def try_it(port: int) -> int:
    async with served(port) as client:
        started = await client.post("/runs", json={"scenario": "slow_tree", "children": CHILDREN})
        run_id = started.json()["run_id"]
        await scanning(run_id, CHILDREN)
        began = time.perf_counter()
        stopped = (await client.post(f"/runs/{run_id}/cancel")).json()
        took_ms = (time.perf_counter() - began) * 1000
    runs = walk(stopped)
    statuses = {r["status"] for r in runs}
    print(f"slow_tree over HTTP: {len(runs)} runs, all {', '.join(sorted(statuses))}")
    print(f"POST /runs/{{id}}/cancel answered with the stopped tree in {took_ms:.1f} ms")
    return 0 if len(runs) == CHILDREN + 1 and statuses == {"interrupted"} and took_ms < 200 else 1


async def scanning(run_id: str, children: int, limit_s: float = 60.0) -> None:
    """Wait until every child of the tree is inside its scan (its first reply
    saved), however slowly a loaded machine starts them."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with contextlib.suppress(RunNotFound):  # its root is saved at its first step
            kids = [s for s in service.runner.store.tree(run_id) if s.parent_id is not None]
            if len(kids) == children and all(k.turns >= 1 for k in kids):
                return
        await asyncio.sleep(0.02)
    raise SystemExit(
        f"timed out after {limit_s:g} s waiting for {children} children in their scans"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    sys.exit(asyncio.run(try_it(free_port())))
