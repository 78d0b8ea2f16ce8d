"""``examples/fastapi_app.py``: trees started, streamed, stopped and approved over
HTTP from asyncio, through httpx's ASGI transport (uvicorn: tests/test_examples.py
runs the script, which cancels a 20-run tree over a real socket)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import fastapi_app
import httpx


def call(steps: Any) -> Any:
    async def main() -> Any:
        transport = httpx.ASGITransport(app=fastapi_app.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await steps(client)

    return asyncio.run(main())


async def streamed_research(client: httpx.AsyncClient) -> tuple[list[dict[str, Any]], Any]:
    """Start a research tree, read its events as they come; they and its result."""
    run_id = (await client.post("/runs", json={"scenario": "research"})).json()["run_id"]
    events = []
    async with client.stream("GET", f"/runs/{run_id}/events") as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        async for line in streamed.aiter_lines():
            if line:
                assert line.startswith("data: ")
                events.append(json.loads(line[6:]))
    return events, (await client.get(f"/runs/{run_id}")).json()


def assert_whole_research_tree(events: list[dict[str, Any]], result: dict[str, Any]) -> None:
    assert {e["run_id"] for e in events if e["type"] == "run_started"} == {
        r["run_id"] for r in fastapi_app.walk(result)
    }
    assert events[-1]["type"] == "run_stopped" and result["status"] == "completed"
    assert len(fastapi_app.walk(result)) == 4


def test_a_tree_is_started_its_events_streamed_and_its_result_read() -> None:
    assert_whole_research_tree(*call(streamed_research))


def test_under_uvicorn_the_events_stream_over_a_socket_as_they_happen() -> None:
    async def main() -> tuple[list[dict[str, Any]], Any]:
        async with fastapi_app.served(fastapi_app.free_port()) as client:
            return await streamed_research(client)

    events, result = asyncio.run(main())
    assert_whole_research_tree(events, result)
    assert any(e["type"] == "text_delta" for e in events)  # streamed pieces, not replies only


def test_cancel_stops_a_20_run_tree() -> None:
    async def steps(client: httpx.AsyncClient) -> dict[str, Any]:
        body = {"scenario": "slow_tree", "children": 19}
        run_id = (await client.post("/runs", json=body)).json()["run_id"]
        await asyncio.sleep(1.0)
        return (await client.post(f"/runs/{run_id}/cancel")).json()

    runs = fastapi_app.walk(call(steps))
    assert len(runs) == 20 and {r["status"] for r in runs} == {"interrupted"}
    assert {r["reason"] for r in runs} == {"cancelled over HTTP"}


def test_approve_continues_a_run_that_waits_for_a_human() -> None:
    async def steps(client: httpx.AsyncClient) -> dict[str, Any]:
        run_id = (await client.post("/runs", json={"scenario": "destructive"})).json()["run_id"]
        return (await client.post(f"/runs/{run_id}/approve")).json()

    result = call(steps)
    assert result["status"] == "completed" and result["answer"].startswith("Deleted")


def test_grant_continues_a_child_that_asked_for_more() -> None:
    async def steps(client: httpx.AsyncClient) -> tuple[Any, Any, Any]:
        body = {"scenario": "research_runaway", "on_limit": "ask", "child_budget": 0.004}
        run_id = (await client.post("/runs", json=body)).json()["run_id"]
        async with client.stream("GET", f"/runs/{run_id}/events") as streamed:
            async for _ in streamed.aiter_lines():  # until the tree stops
                pass
        paused = (await client.get(f"/runs/{run_id}")).json()
        granted = (await client.post(f"/runs/{run_id}/grant", json={"usd": 0.003})).json()
        refused = await client.post(f"/runs/{run_id}/approve")
        return paused, granted, refused

    paused, granted, refused = call(steps)
    asking = paused["interruption"]["run_id"]

    def turns(result: dict[str, Any]) -> int:
        return next(r["turns"] for r in fastapi_app.walk(result) if r["run_id"] == asking)

    assert paused["status"] == "interrupted"
    assert paused["interruption"]["kind"] == "budget_request"
    # the runaway went on with the grant (and, never answering, asked again)
    assert (
        turns(granted) > turns(paused)
        and granted["interruption"]["call_id"] != (paused["interruption"]["call_id"])
    )
    assert refused.status_code == 409 and "asks for more budget" in refused.text


def test_bad_requests_are_said() -> None:
    async def steps(client: httpx.AsyncClient) -> tuple[int, int]:
        bad = await client.post("/runs", json={"scenario": "nope"})
        missing = await client.get("/runs/run_nope")
        return bad.status_code, missing.status_code

    assert call(steps) == (422, 404)


async def events_of(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The event stream of a run, read to its end (failing after 10 s rather than hanging)."""
    events = []
    async with asyncio.timeout(10), client.stream("GET", f"/runs/{run_id}/events") as streamed:
        async for line in streamed.aiter_lines():
            if line:
                events.append(json.loads(line.removeprefix("data: ")))
    return events


async def finished_and_streamed(client: httpx.AsyncClient) -> list[list[dict[str, Any]]]:
    """A plan tree streamed as it runs, then twice once it stopped."""
    run_id = (await client.post("/runs", json={"scenario": "plan"})).json()["run_id"]
    live = await events_of(client, run_id)
    return [live, await events_of(client, run_id), await events_of(client, run_id)]


def assert_each_stream_is_the_tree_s_events(streams: list[list[dict[str, Any]]]) -> None:
    for events in streams:
        assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_stopped"
    recorded = [e for e in streams[0] if e["type"] != "text_delta"]
    assert [e["type"] for e in streams[1]] == [e["type"] for e in recorded]
    assert streams[1] == streams[2]


def test_the_stream_of_a_finished_run_returns_its_events_and_closes() -> None:
    assert_each_stream_is_the_tree_s_events(call(finished_and_streamed))


def test_under_uvicorn_a_finished_run_s_stream_closes_and_the_server_stops() -> None:
    async def main() -> tuple[list[list[dict[str, Any]]], float]:
        async with fastapi_app.served(fastapi_app.free_port()) as client:
            streams = await finished_and_streamed(client)
            stopping = time.perf_counter()
        return streams, time.perf_counter() - stopping

    streams, stopping_s = asyncio.run(main())
    assert_each_stream_is_the_tree_s_events(streams)
    assert stopping_s < 2.0


# -- AG-UI ------------------------------------------------------------------------------


async def agui_of(client: httpx.AsyncClient, run_id: str) -> list[str]:
    """The AG-UI stream of a run, its ``data:`` lines (failing after 10 s rather than hanging)."""
    lines = []
    async with asyncio.timeout(10), client.stream("GET", f"/runs/{run_id}/agui") as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        async for line in streamed.aiter_lines():
            if line:
                lines.append(line)
    return lines


def test_the_agui_endpoint_streams_a_research_tree_its_children_as_subagents() -> None:
    pytest.importorskip("ag_ui")
    from ag_ui.core import EventType
    from test_agui import (
        assert_children_in_order,
        assert_messages_well_formed,
        assert_tool_calls_well_formed,
        parsed,
    )

    async def steps(client: httpx.AsyncClient) -> tuple[list[str], list[str], Any]:
        run_id = (await client.post("/runs", json={"scenario": "research"})).json()["run_id"]
        live = await agui_of(client, run_id)
        result = (await client.get(f"/runs/{run_id}")).json()
        return live, await agui_of(client, run_id), result

    live, replayed, result = call(steps)
    events = parsed(live)
    assert [e.type for e in (events[0], events[-1])] == [
        EventType.RUN_STARTED,
        EventType.RUN_FINISHED,
    ]
    assert events[0].run_id == events[-1].run_id == result["run_id"]  # type: ignore[attr-defined]
    children = {child["run_id"]: child["parent_call_id"] for child in result["children"]}
    assert len(children) == 3
    assert_children_in_order(events, result["run_id"], children)
    assert_messages_well_formed(events, None)
    assert_tool_calls_well_formed(events)

    def runs(stream: list[Any]) -> dict[str | None, list[tuple[Any, ...]]]:
        """Each run's AG-UI events but its text (its subagent run id: None for the root)."""
        by_run: dict[str | None, list[tuple[Any, ...]]] = {}
        for e in stream:
            if not e.type.value.startswith("TEXT_MESSAGE"):
                said = (e.type, getattr(e, "tool_call_id", None), getattr(e, "name", None))
                by_run.setdefault(getattr(e, "subagent_run_id", None), []).append(said)
        return by_run

    # a stopped tree streams from its recorded events: each run's the same, but for its text
    again = parsed(replayed)
    assert runs(again) == runs(events)
    assert_children_in_order(again, result["run_id"], children)
