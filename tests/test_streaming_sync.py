"""A tree's events and words from plain code (``Runner.stream_sync``, issue 49 point 4)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from orchestra import ConfigError, OpenAIProvider, Runner, SQLiteStore, Status
from orchestra._streaming import EXITED
from orchestra.testing import ScriptedTransport, demo_agent, make_sandbox


@pytest.fixture
def box(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "box")


def runner(**transport: float) -> Runner:
    scripted = ScriptedTransport(**transport)
    return Runner(provider=OpenAIProvider(base_url="http://scripted/v1", transport=scripted))


def test_every_event_of_the_tree_arrives_in_order_then_the_result(box: Path) -> None:
    stream = runner().stream_sync(demo_agent("research", box), "go")
    events = list(stream)
    assert events[0].type == "run_started" and events[0].depth == 0
    assert events[-1].type == "run_stopped" and events[-1].depth == 0
    assert sum(e.type == "run_started" and e.depth == 1 for e in events) == 3
    assert any(e.type == "text_delta" and e.depth == 1 for e in events)
    assert stream.result.status is Status.COMPLETED
    assert list(stream) == []  # read once


def test_text_gives_the_roots_words_alone_as_they_arrive(box: Path) -> None:
    stream = runner(chunk_s=0.005).stream_sync(demo_agent("research", box), "go")
    pieces = list(stream.text())
    assert len(pieces) > 1  # streamed, not whole
    assert "".join(pieces) == stream.result.state.answer
    assert "".join(pieces).startswith("Findings: 1) errors.log says:")


def test_leaving_the_block_early_stops_the_whole_tree(box: Path) -> None:
    with runner().stream_sync(demo_agent("slow_tree", box), "go, children=3") as stream:
        for event in stream:
            if event.type == "tool_start" and event.depth == 1:
                break  # a child is in its slow scan
    states = list(stream.result.walk())
    assert len(states) == 4
    assert {s.status for s in states} == {Status.INTERRUPTED}
    assert stream.result.state.reason == "left the stream's block"


def test_it_works_where_an_asyncio_loop_runs_as_in_a_notebook(box: Path) -> None:
    async def cell() -> str:
        return "".join(runner().stream_sync(demo_agent("plan", box), "go").text())

    assert asyncio.run(cell()).startswith("errors.log mentions a timeout")


def test_a_tree_that_cannot_start_raises_at_once(box: Path) -> None:
    with pytest.raises(ConfigError, match="a run needs a non-empty task"):
        runner().stream_sync(demo_agent("plan", box), "  ")


def test_a_script_that_ends_with_its_tree_running_leaves_it_interrupted_and_saved(
    tmp_path: Path,
) -> None:
    script = f"""
from pathlib import Path
from orchestra import OpenAIProvider, Runner, SQLiteStore
from orchestra.testing import ScriptedTransport, demo_agent, make_sandbox
box = make_sandbox(Path({str(tmp_path / "box")!r}))
provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
runner = Runner(provider=provider, store=SQLiteStore({str(tmp_path / "runs.db")!r}))
stream = runner.stream_sync(demo_agent("slow_tree", box), "go, children=3")
"""  # the stream is never read: the script ends while the tree scans
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    with SQLiteStore(tmp_path / "runs.db") as store:
        (root,) = store.list_runs()
    assert root.status is Status.INTERRUPTED and root.reason == EXITED
