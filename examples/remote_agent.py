"""Claim: a child that is another Orchestra service runs within its caller's carve,
and a cancel of the caller stops it.

Two services over HTTP on loopback: a *team* service (a small ASGI app served by
hypercorn, with its own ``Runner``) runs a research tree for each ``POST /ask``,
within the ``Orchestra-Limits`` header it is sent (``orchestra.wire``), stops it
when the client goes away, and replies with what its tree spent. The *lead*
(another ``Runner``) asks it through a tool that holds a share of the lead's
budget (``ctx.remote(usd=...)``), sends the carve and reports the spend back.

1. Within the carve: the lead holds $0.006 of its $0.05 for the call; the team's
   tree (whose own limit is $1) runs with a $0.006 budget, stops within it, and
   the lead's tree cost counts what the team spent.
2. Cancel: the lead asks the team for a slow tree (3 scans of 3 s, a $0.03
   carve) and is cancelled 1 s later; the request closes, the team cancels its tree: every
   run of it ``interrupted``, within 500 ms of the lead's cancel.

Prints one row per claim; exits 1 unless both hold.

    python examples/remote_agent.py
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from orchestra import Agent, Event, Limits, OpenAIProvider, Runner, Status, ToolContext, tool
from orchestra.testing import ScriptedTransport, demo_agent, make_sandbox
from orchestra.wire import WireLimits, cancel_on_disconnect

TEAM_OWN = Limits(max_turns=20, max_budget_usd=1.0)
CARVE_USD = 0.006
SANDBOX = make_sandbox(Path(tempfile.mkdtemp()) / "incident")


def scripted() -> OpenAIProvider:
    return OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())


class Team:
    """The team service: one research tree per request, within the carve it is sent."""

    def __init__(self) -> None:
        self.runner = Runner(provider=scripted())
        self.trees: list[Any] = []
        self.replied = trio.Event()
        self.cancelled_at: float | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        body = json.loads((await receive())["body"] or b"{}")
        carve = WireLimits.from_headers(headers)
        limits = TEAM_OWN if carve is None else carve.within(TEAM_OWN)
        agent = demo_agent(body.get("scenario", "research"), SANDBOX, limits=limits)
        async with trio.open_nursery() as nursery:
            handle = await self.runner.start(nursery, agent, body["question"])
            nursery.start_soon(cancel_on_disconnect, receive, self._gone(handle))
            result = await handle.wait()
            nursery.cancel_scope.cancel()
        self.trees.append(result)
        self.replied.set()
        reply = {"answer": result.state.answer, "spent_usd": result.tree_cost_usd}
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(reply).encode()})

    def _gone(self, handle: Any) -> Any:
        def cancel() -> None:
            self.cancelled_at = time.perf_counter()
            handle.cancel("the caller went away")

        return cancel


async def _lifespan(receive: Any, send: Any) -> None:
    """Start up and shut down at once (the service keeps nothing across requests)."""
    while True:
        kind = (await receive())["type"]
        await send({"type": f"{kind}.complete"})
        if kind == "lifespan.shutdown":
            return


def lead_agent(url: str, scenario: str, carve_usd: float = CARVE_USD) -> Agent:
    @tool(read_only=True)
    async def research(question: str, ctx: ToolContext) -> str:
        """Ask the team service one question."""
        async with ctx.remote(usd=carve_usd) as call, httpx.AsyncClient(timeout=60) as client:
            body = {"question": question, "scenario": scenario}
            reply = (await client.post(url, json=body, headers=call.headers())).json()
            call.report(reply["spent_usd"])
            return str(reply["answer"])

    limits = Limits(max_turns=10, max_budget_usd=0.05)
    return Agent(name="lead", model="deep", tools=[research], limits=limits)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main() -> int:
    team, port = Team(), free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "ERROR"
    url = f"http://127.0.0.1:{port}/ask"
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: serve(team, config, task_status=task_status))
        within = await _within(team, url)
        stopped = await _cancel(team, url)
        nursery.cancel_scope.cancel()
    return 0 if within and stopped else 1


async def _within(team: Team, url: str) -> bool:
    events: list[Event] = []
    lead = await Runner(provider=scripted(), sink=events.append).run(
        lead_agent(url, "research"), "Why?"
    )
    tree = team.trees[-1]
    charged = [e.data["cost_usd"] for e in events if e.type == "remote_spend"]
    budget = tree.state.limits.max_budget_usd
    held = budget == CARVE_USD and tree.tree_cost_usd <= CARVE_USD
    # the lead was charged what the team reported, on top of its own model calls
    counted = charged == [tree.tree_cost_usd] and lead.tree_cost_usd > tree.tree_cost_usd
    print(f"{'team budget (carve)':<26}${budget:.4f}  (its own: ${TEAM_OWN.max_budget_usd})")
    print(f"{'team tree spent':<26}${tree.tree_cost_usd:.4f}  {tree.status.value}")
    print(f"{'lead charged for the call':<26}${charged[0] if charged else 0:.4f}")
    print(f"{'lead tree (team counted)':<26}${lead.tree_cost_usd:.4f}  {lead.status.value}")
    return held and counted


async def _cancel(team: Team, url: str) -> bool:
    async with trio.open_nursery() as nursery:
        handle = await Runner(provider=scripted()).start(
            nursery, lead_agent(url, "slow_tree", 0.03), "Scan, children=3."
        )
        await trio.sleep(1.0)
        pressed = time.perf_counter()
        team.replied = trio.Event()
        handle.cancel("stop")
        await team.replied.wait()  # the team replies once its tree stopped
    gap_ms = ((team.cancelled_at or float("inf")) - pressed) * 1000
    states = {s.status for s in team.trees[-1].walk()}
    print(f"{'team stopped after':<26}{gap_ms:.0f} ms  {sorted(s.value for s in states)}")
    return states == {Status.INTERRUPTED} and gap_ms < 500


if __name__ == "__main__":
    code = trio.run(main)
    print("claim holds" if code == 0 else "CLAIM FAILED")
    sys.exit(code)
