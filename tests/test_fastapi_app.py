"""``examples/fastapi_app.py``: trees started, streamed, stopped and approved over
HTTP from asyncio, through httpx's ASGI transport (uvicorn: tests/test_examples.py
runs the script, which cancels a 20-run tree over a real socket)."""

from __future__ import annotations

import asyncio
import json
import sys
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


def test_bad_requests_are_said() -> None:
    async def steps(client: httpx.AsyncClient) -> tuple[int, int]:
        bad = await client.post("/runs", json={"scenario": "nope"})
        missing = await client.get("/runs/run_nope")
        return bad.status_code, missing.status_code

    assert call(steps) == (422, 404)
