"""A tree's readers (``RunHandle.events()``, :mod:`orchestra._feed`): every reader
ends, opened before, during or after its tree stops, however it stops (issue 43.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from orchestra import LeaseError, OpenAIProvider, RunHandle, Runner, SQLiteStore
from orchestra._feed import EventFeed
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra.testing import ScriptedTransport


def runner(**kw: Any) -> Runner:
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=ScriptedTransport())
    return Runner(provider=provider, **kw)


async def read(handle: RunHandle, into: list[str]) -> None:
    await drain(handle.events(), into)


async def drain(feed: EventFeed, into: list[str]) -> None:
    into.extend([event.type async for event in feed])


async def test_readers_opened_before_during_and_after_the_tree_stops_end(
    sandbox: Path, autojump_clock: Any
) -> None:
    before: list[str] = []
    during: list[str] = []
    after: list[str] = []
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            handle = await runner().start(nursery, demo_agent("slow", sandbox), demo_task("slow"))
            nursery.start_soon(drain, handle.events(), before)  # subscribed before it starts
            await trio.sleep(1.0)
            nursery.start_soon(read, handle, during)
            await handle.wait()
        await read(handle, after)
    assert before[0] == "run_started" and before[-1] == "run_stopped"
    assert "run_started" not in during and during[-1] == "run_stopped"
    assert after == []
    assert trio.current_time() < 600


async def test_readers_end_when_the_tree_cannot_start(sandbox: Path, tmp_path: Path) -> None:
    """No root ``run_stopped`` (another process holds the tree's lease): the readers
    end all the same."""
    store = SQLiteStore(tmp_path / "runs.db")
    assert store.leases is not None
    store.leases.acquire_lease("held", "another process", ttl=60)
    seen: list[str] = []

    async def start_held(readers: trio.Nursery) -> None:
        async with trio.open_nursery() as trees:
            agent, task = demo_agent("plan", sandbox), demo_task("plan")
            handle = await runner(store=store).start(trees, agent, task, run_id="held")
            readers.start_soon(read, handle, seen)

    with trio.fail_after(10):
        async with trio.open_nursery() as readers:
            with pytest.raises(BaseExceptionGroup) as caught:
                await start_held(readers)
    assert caught.group_contains(LeaseError)
    assert seen == []
    store.close()


async def test_a_closed_feed_takes_no_more_and_a_waiting_reader_wakes() -> None:
    feed = EventFeed()
    got: list[Any] = []

    async def drain() -> None:
        got.extend([e async for e in feed])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await trio.testing.wait_all_tasks_blocked()
        feed.close()
    assert got == [] and feed.closed
    assert [e async for e in EventFeed.ended()] == []
