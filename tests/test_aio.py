"""``orchestra.aio``: trees from asyncio, in a trio run on a thread of its own per loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from orchestra import OpenAIProvider, Runner, Status, aio
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox

PLAN_ANSWER = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."


@pytest.fixture
def box(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "box")


def runner() -> Runner:
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    return Runner(provider=provider)


def test_asyncio_run_of_aio_run_completes(box: Path) -> None:
    result = asyncio.run(aio.run(runner(), demo_agent("plan", box), demo_task("plan")))
    assert (result.status, result.answer) == (Status.COMPLETED, PLAN_ANSWER)


def test_trees_at_once_share_one_runner(box: Path) -> None:
    async def main() -> list[Status]:
        shared = runner()
        agent = demo_agent("research", box)
        results = await asyncio.gather(*(aio.run(shared, agent, "go") for _ in range(3)))
        again = await aio.run(shared, agent, "go")  # the same trio run, kept up between trees
        return [r.status for r in (*results, again)]

    assert asyncio.run(main()) == [Status.COMPLETED] * 4


def test_cancelling_the_awaiting_task_stops_a_20_run_tree_and_no_other_task(box: Path) -> None:
    async def main() -> tuple[float, set[Status], int, bool]:
        handle = await aio.start(runner(), demo_agent("slow_tree", box), demo_task("slow_tree", 19))
        waiter = asyncio.create_task(handle.wait())
        bystander = asyncio.create_task(asyncio.sleep(0.5))
        await asyncio.sleep(1.0)  # the children are inside their 3 s scans
        started = time.perf_counter()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        took = time.perf_counter() - started
        result = await handle.wait()
        await bystander  # untouched: a tree's Stop is no CancelledError elsewhere
        runs = result.walk()
        return took, {r.status for r in runs}, len(runs), bystander.cancelled()

    took, statuses, runs, bystander_cancelled = asyncio.run(main())
    assert runs == 20 and statuses == {Status.INTERRUPTED}
    assert took < 0.05 and not bystander_cancelled


def test_handle_cancel_is_a_result_not_an_error(box: Path) -> None:
    async def main() -> tuple[Status, str]:
        handle = await aio.start(runner(), demo_agent("slow", box), demo_task("slow"))
        await asyncio.sleep(0.3)
        handle.cancel("enough")
        result = await handle.wait()
        return result.status, result.state.reason

    assert asyncio.run(main()) == (Status.INTERRUPTED, "enough")


def test_the_trees_events_reach_asyncio(box: Path) -> None:
    async def main() -> tuple[set[str], int]:
        handle = await aio.start(runner(), demo_agent("research", box), "go")
        seen = [event async for event in handle.events()]
        await handle.wait()
        started = {e.run_id for e in seen if e.type == "run_started"}
        return started, sum(e.type == "run_stopped" for e in seen)

    started, stopped = asyncio.run(main())
    assert len(started) == 4 and stopped == 4


@pytest.mark.parametrize("wait_s", [0.0, 0.001, 0.005, 0.02, 0.5])
def test_cancelling_aio_run_stops_its_tree_even_before_it_started(box: Path, wait_s: float) -> None:
    """aio.run has no handle on the asyncio side (the loop is not woken while the
    tree runs): a cancel that comes before the tree exists waits for it."""
    from orchestra import MemoryStore

    store = MemoryStore()
    shared = Runner(
        provider=OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport()),
        store=store,
    )

    async def main() -> None:
        task = asyncio.create_task(
            aio.run(shared, demo_agent("slow", box), demo_task("slow"), run_id="run_x")
        )
        await asyncio.sleep(wait_s)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    if wait_s < 0.5 and "run_x" not in {s.run_id for s in store.list_runs()}:
        return  # cancelled before it was submitted: nothing started
    saved = store.load("run_x")
    assert saved.status is Status.INTERRUPTED and saved.reason == aio.CANCELLED


def _aio_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "orchestra-aio" and t.is_alive()]


def test_one_trio_run_serves_a_loops_trees_one_after_another(box: Path) -> None:
    """Between trees the trio run stays up (its thread, its pooled connections):
    a tree after the last one does not pay for a new thread."""

    async def main() -> list[list[threading.Thread]]:
        shared, seen = runner(), []
        for _ in range(3):
            await aio.run(shared, demo_agent("plan", box), demo_task("plan"))
            seen.append(_aio_threads())
        return seen

    seen = asyncio.run(main())
    assert len(seen[0]) == 1 and seen == [seen[0]] * 3
    assert _aio_threads() == []  # asyncio.run's shutdown ended it


def test_a_tree_still_running_when_the_loop_shuts_down_is_interrupted(box: Path) -> None:
    from orchestra import MemoryStore

    store = MemoryStore()
    shared = Runner(
        provider=OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport()),
        store=store,
    )

    async def main() -> None:  # returns with the tree (seconds long) running
        await aio.start(shared, demo_agent("slow", box), demo_task("slow"), run_id="left")
        await asyncio.sleep(0.1)

    started = time.perf_counter()
    asyncio.run(main())
    assert time.perf_counter() - started < 1.0
    saved = store.load("left")
    assert (saved.status, saved.reason) == (Status.INTERRUPTED, aio.SHUT_DOWN)
    assert _aio_threads() == []


def test_an_idle_trio_run_stops_after_linger_and_the_next_tree_starts_another(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aio, "LINGER", 0.05)

    async def main() -> tuple[float, Status]:
        shared = runner()
        await aio.run(shared, demo_agent("plan", box), demo_task("plan"))
        (thread,), idle = _aio_threads(), time.perf_counter()
        await asyncio.to_thread(thread.join, 10)  # idle past LINGER: it stops by itself
        idled = time.perf_counter() - idle if not thread.is_alive() else float("inf")
        again = await aio.run(shared, demo_agent("plan", box), demo_task("plan"))
        return idled, again.status

    idled, status = asyncio.run(main())
    assert 0.04 <= idled < 10 and status is Status.COMPLETED
