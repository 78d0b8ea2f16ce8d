"""Errors as promised: a store that fails a tree comes out of ``Runner.run``,
``Runner.resume`` and ``RunHandle.wait`` as the error itself, never a group of
one; a cleanup that fails after an error never hides it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestra import Agent, LeaseLost, OpenAIProvider, Runner, SQLiteStore, StoreError
from orchestra._cli.demo import demo_task
from orchestra._runner import RunHandle
from orchestra._state import RunState
from orchestra._stores.fence import Fence


class DiskFills(SQLiteStore):
    """A SQLite store whose saves fail once ``left`` more have been made (a full disk);
    ``release_fails`` makes letting a tree go fail too."""

    def __init__(self, path: Path, left: int, *, release_fails: bool = False) -> None:
        super().__init__(path)
        self.left = left
        self.release_fails = release_fails

    def save_many(
        self,
        states: Sequence[RunState],
        events: Sequence[dict[str, Any]] = (),
        *,
        fence: Fence | None = None,
    ) -> None:
        self.left -= 1
        if self.left < 0:
            raise StoreError(f"{self.path}: cannot save: database or disk is full")
        super().save_many(states, events, fence=fence)

    def let_go(self, root_id: str, owner: str) -> None:
        if self.release_fails:
            raise StoreError(f"{self.path}: cannot let go of {root_id!r}: disk I/O error")
        super().let_go(root_id, owner)


@pytest.mark.parametrize("release_fails", [False, True], ids=["release ok", "release fails"])
async def test_a_full_disk_mid_tree_raises_the_store_error_itself(
    provider: OpenAIProvider,
    scenario_agent: Callable[..., Agent],
    tmp_path: Path,
    release_fails: bool,
) -> None:
    research = scenario_agent("research")
    for left in (3, 5, 8, 12):  # the disk fills at different moments of the fan-out
        store = DiskFills(tmp_path / f"runs-{left}.db", left, release_fails=release_fails)
        with pytest.raises(StoreError, match="disk is full") as caught:
            await Runner(provider=provider, store=store).run(research, demo_task("research"))
        assert type(caught.value) is StoreError, repr(caught.value)
        notes = getattr(caught.value, "__notes__", [])
        if release_fails:
            assert any("stopping the tree failed too" in n and "disk I/O" in n for n in notes)
        store.close()


async def test_a_full_disk_reaches_wait_as_the_store_error_itself(
    provider: OpenAIProvider, scenario_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    store = DiskFills(tmp_path / "runs.db", 5)
    runner = Runner(provider=provider, store=store)
    seen: list[BaseException] = []
    handles: list[RunHandle] = []

    async def start_and_wait() -> None:
        async with trio.open_nursery() as nursery:
            handles.append(await runner.start(nursery, scenario_agent("research"), "go"))
            try:
                await handles[0].wait()
            except StoreError as exc:
                seen.append(exc)

    with pytest.raises(BaseExceptionGroup) as group:  # the nursery gets it too
        await start_and_wait()
    assert group.group_contains(StoreError)
    (handle,) = handles
    assert [type(e) for e in seen] == [StoreError]
    assert handle.done
    with pytest.raises(StoreError, match="disk is full") as again:
        await handle.wait()
    assert type(again.value) is StoreError
    store.close()


async def test_a_resume_with_a_full_disk_raises_the_store_error_itself(
    provider: OpenAIProvider, scenario_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    path = tmp_path / "runs.db"
    research = scenario_agent("research")
    with trio.CancelScope() as scope:  # stopped after its first save: resumable
        runner = Runner(provider=provider, store=SQLiteStore(path))
        async with trio.open_nursery() as nursery:
            handle = await runner.start(nursery, research, demo_task("research"))
            scope.cancel()
    full = DiskFills(path, 2)
    with pytest.raises(StoreError) as caught:
        await Runner(provider=provider, store=full).resume(handle.run_id, research)
    assert type(caught.value) is StoreError
    full.close()


async def test_lost_lease_is_raised_itself(
    provider: OpenAIProvider, scenario_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    class Stolen(SQLiteStore):
        def save_many(self, states: Any, events: Any = (), *, fence: Any = None) -> None:
            raise LeaseLost("'me' lost the lease on run tree 'x' (test)")

    store = Stolen(tmp_path / "runs.db")
    with pytest.raises(LeaseLost) as caught:
        await Runner(provider=provider, store=store).run(scenario_agent("research"), "go")
    assert type(caught.value) is LeaseLost
    store.close()
