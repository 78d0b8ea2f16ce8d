"""``orchestra.aio``: trees from asyncio, in a trio run on a thread of its own per loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from orchestra import OpenAIProvider, Runner, Status, aio
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox

_T = TypeVar("_T")
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


# -- readers end, and a cancel while awaiting start stops the tree (issue 43.5) -------------


def within(seconds: float, main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """``asyncio.run(main())``, failing (not hanging) if it has not returned in ``seconds``."""
    outcome: dict[str, Any] = {}

    def go() -> None:
        try:
            outcome["value"] = asyncio.run(main())
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"asyncio.run still running after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


async def read(handle: aio.Handle) -> list[str]:
    return [event.type async for event in handle.events()]


def test_readers_opened_before_during_and_after_the_tree_stops_end(box: Path) -> None:
    async def main() -> list[list[str]]:
        handle = await aio.start(runner(), demo_agent("slow", box), demo_task("slow"))
        first = asyncio.create_task(read(handle))  # subscribed when the tree started
        await asyncio.sleep(0.2)
        during = asyncio.create_task(read(handle))
        await handle.wait()
        return [await first, await during, await read(handle), await read(handle)]

    first, during, after, again = within(20, main)
    assert first[0] == "run_started" and first[-1] == "run_stopped"
    assert "run_started" not in during and during[-1] == "run_stopped"
    assert after == again == []


def test_a_reader_opened_after_the_trio_run_idled_out_ends(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aio, "LINGER", 0.05)

    async def main() -> tuple[list[str], list[str]]:
        handle = await aio.start(runner(), demo_agent("plan", box), demo_task("plan"))
        await handle.wait()
        (thread,) = _aio_threads()
        await asyncio.to_thread(thread.join, 10)  # the trio run is gone
        return await read(handle), await read(handle)

    first, second = within(20, main)
    assert first[-1] == "run_stopped" and second == []


@pytest.mark.parametrize("tree", ["running", "stopped"])
def test_cancelling_a_reader_never_blocks_the_loop_s_shutdown(box: Path, tree: str) -> None:
    """A reader cancelled while its tree runs (main then returns: the loop's shutdown
    stops the tree), or one of a tree that stopped (it may have ended already)."""

    async def main() -> None:
        handle = await aio.start(runner(), demo_agent("slow", box), demo_task("slow"))
        if tree == "stopped":
            await read(handle)
            await handle.wait()
        reader = asyncio.create_task(read(handle))
        await asyncio.sleep(0.05)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader

    started = time.perf_counter()
    within(20, main)
    assert time.perf_counter() - started < 10
    assert _aio_threads() == []


def test_a_task_cancelled_while_awaiting_start_stops_the_tree(box: Path) -> None:
    from orchestra import MemoryStore

    store = MemoryStore()
    shared = Runner(
        provider=OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport()),
        store=store,
    )

    async def main() -> list[tuple[Status, str]]:
        await aio.run(shared, demo_agent("plan", box), demo_task("plan"))  # the trio run is up
        stopped = []
        for n in range(10):
            task = asyncio.create_task(
                aio.start(shared, demo_agent("slow", box), demo_task("slow"), run_id=f"t{n}")
            )
            await asyncio.sleep(0)  # it waits for the start
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            saved = store.load(f"t{n}")  # stopped by the time the cancel is raised
            stopped.append((saved.status, saved.reason))
        return stopped

    assert within(30, main) == [(Status.INTERRUPTED, aio.CANCELLED)] * 10


def test_the_roots_words_reach_asyncio(box: Path) -> None:
    async def main() -> tuple[str, str | None]:
        handle = await aio.start(runner(), demo_agent("research", box), "go")
        words = [piece async for piece in handle.text()]
        result = await handle.wait()
        return "".join(words), result.state.answer

    said, answer = asyncio.run(main())
    assert said == answer and said.startswith("Findings: 1) errors.log says:")
