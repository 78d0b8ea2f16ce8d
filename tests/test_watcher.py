"""One watcher per runner; a cancelled tree's runs saved together."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from orchestra import Runner, Status
from orchestra._recipes.demo import demo_task
from orchestra._stores.sqlite import SQLiteStore


class CountingStore(SQLiteStore):
    """A SQLite store that counts cancel polls and write transactions."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.polls = 0
        self.saves: list[int] = []  # runs per transaction

    def pending_cancels(self, root_id: str | None = None) -> dict[str, str]:
        self.polls += 1
        return super().pending_cancels(root_id)

    def save_many(self, states: Any, events: Any = (), **fence: Any) -> None:
        self.saves.append(len(states))
        super().save_many(states, events, **fence)


async def test_one_watcher_polls_for_every_tree_of_a_runner(
    provider, scenario_agent, tmp_path, autojump_clock
):
    store = CountingStore(tmp_path / "runs.db")
    runner = Runner(provider=provider, store=store, poll_interval=0.05)
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            await runner.start(nursery, scenario_agent("slow"), demo_task("slow"))
        await trio.sleep(1.0)
        assert 19 <= store.polls <= 21  # 1 s / 50 ms, whatever the number of trees
        nursery.cancel_scope.cancel()


async def test_another_tree_takes_over_polling_when_the_polling_one_stops(
    provider, scenario_agent, tmp_path, autojump_clock
):
    store = CountingStore(tmp_path / "runs.db")
    runner = Runner(provider=provider, store=store, poll_interval=0.05)
    async with trio.open_nursery() as nursery:
        first = await runner.start(nursery, scenario_agent("plan"), demo_task("plan"))
        slow = await runner.start(nursery, scenario_agent("slow"), demo_task("slow"))
        assert (await first.wait()).status is Status.COMPLETED
        await trio.sleep(0.5)
        store.request_cancel(slow.run_id, "from another process")
        result = await slow.wait()
        assert trio.current_time() < 1.0
    assert result.status is Status.INTERRUPTED
    assert result.state.reason == "from another process"


async def test_a_cancelled_tree_is_saved_in_one_transaction(
    provider, scenario_agent, tmp_path, autojump_clock
):
    store = CountingStore(tmp_path / "runs.db")
    runner = Runner(provider=provider, store=store)
    agent = scenario_agent("slow_tree")
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("slow_tree", 12))
        await trio.sleep(1.0)
        saves_before = len(store.saves)
        handle.cancel("stop")
        result = await handle.wait()
    assert store.saves[saves_before:] == [13]  # the root and its 12 children, together
    saved = store.tree(result.run_id)
    assert len(saved) == 13
    assert {s.status for s in saved} == {Status.INTERRUPTED}
    stopped = [e for e in store.events(root_id=result.run_id) if e["type"] == "run_stopped"]
    assert len(stopped) == 13


class _SaveWatchingStore(CountingStore):
    """Notes, at each transaction, the exception on its way out of the saving task."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.in_flight: list[BaseException | None] = []

    def save_many(self, states: Any, events: Any = (), **fence: Any) -> None:
        self.in_flight.append(sys.exception())
        super().save_many(states, events, **fence)


async def test_a_cancelled_tree_is_saved_before_its_root_lets_the_cancel_go(
    provider, scenario_agent, tmp_path, autojump_clock
):
    # the root records its exit while the Cancelled of its runs is still on its way out
    # of its scope, so the tree is saved before their exceptions and frames are freed
    store = _SaveWatchingStore(tmp_path / "runs.db")
    runner = Runner(provider=provider, store=store)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, scenario_agent("slow_tree"), demo_task("slow_tree", 3))
        await trio.sleep(1.0)
        saves_before = len(store.saves)
        handle.cancel("stop")
        result = await handle.wait()
    assert store.saves[saves_before:] == [4]
    (in_flight,) = store.in_flight[saves_before:]
    assert isinstance(in_flight, BaseExceptionGroup)
    assert in_flight.split(trio.Cancelled)[1] is None
    assert {r.status for r in result.walk()} == {Status.INTERRUPTED}
