"""``Runner.run_sync`` / ``resume_sync``: trees from plain code, and from code where
an asyncio loop already runs (a notebook)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestra import OpenAIProvider, Runner, Status
from orchestra.testing import demo_agent, demo_task, make_sandbox


@pytest.fixture
def box(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "box")


def test_a_plain_script_runs_a_tree_twice_on_one_runner(server_url: str, box: Path) -> None:
    """Over a real socket: the second trio run opens its own connections."""
    runner = Runner(provider=OpenAIProvider(base_url=server_url, api_key="k"))
    for _ in range(2):
        result = runner.run_sync(demo_agent("research", box), demo_task("research"))
        assert result.status is Status.COMPLETED and len(result.walk()) == 4


def test_inside_a_running_asyncio_loop_the_tree_runs_off_its_thread(
    server_url: str, box: Path
) -> None:
    runner = Runner(provider=OpenAIProvider(base_url=server_url, api_key="k"))

    async def notebook_cell() -> str | None:
        return runner.run_sync(demo_agent("plan", box), demo_task("plan")).answer

    assert (
        asyncio.run(notebook_cell())
        == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    )


def test_resume_sync_continues_an_approved_run(server_url: str, box: Path) -> None:
    from orchestra import MemoryStore

    runner = Runner(provider=OpenAIProvider(base_url=server_url, api_key="k"), store=MemoryStore())
    agent = demo_agent("destructive", box)
    stopped = runner.run_sync(agent, demo_task("destructive"))
    assert stopped.status is Status.INTERRUPTED
    runner.approve(stopped.run_id)
    done = runner.resume_sync(stopped.run_id, agent)
    assert done.status is Status.COMPLETED and not (box / "access.log").exists()
