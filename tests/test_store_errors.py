"""Errors as promised: a store that fails a tree comes out of ``Runner.run``,
``Runner.resume`` and ``RunHandle.wait`` as the error itself, never a group of
one; a cleanup that fails after an error never hides it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from orchestra import Agent, LeaseLost, OpenAIProvider, Runner, SQLiteStore, StoreError
from orchestra._cancelled import unwrapped
from orchestra._recipes.demo import demo_task
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


async def test_a_failed_release_after_a_normal_end_is_raised(
    provider: OpenAIProvider, scenario_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    store = DiskFills(tmp_path / "runs.db", 1000, release_fails=True)
    with pytest.raises(StoreError, match="disk I/O error") as caught:
        await Runner(provider=provider, store=store).run(scenario_agent("research"), "go")
    assert type(caught.value) is StoreError
    store.close()


# -- the unwrapping itself (orchestra._cancelled.unwrapped) -------------------------


def _raise(exc: BaseException) -> None:
    with unwrapped():
        raise exc


def test_errors_of_one_type_leave_as_the_first_each_other_in_a_note() -> None:
    first, same, other = StoreError("disk full"), StoreError("disk full"), StoreError("I/O")
    group = ExceptionGroup("tree", [first, ExceptionGroup("fan-out", [same, other])])
    group.add_note("and then stopping the tree failed too: ...")
    with pytest.raises(StoreError) as caught:
        _raise(group)
    assert caught.value is first
    assert caught.value.__notes__ == [
        "(1 more run(s) of the tree met the same error)",
        "and 1 more run(s) of the tree failed with StoreError('I/O')",
        "and then stopping the tree failed too: ...",
    ]


def test_errors_of_several_types_stay_a_group() -> None:
    group = ExceptionGroup("tree", [StoreError("disk full"), LeaseLost("taken over")])
    with pytest.raises(ExceptionGroup) as caught:
        _raise(group)
    assert caught.value is group


async def _fail_when_cancelled(exc: Exception) -> None:
    try:
        await trio.sleep_forever()
    finally:
        raise exc


async def _fan_out_failing_as_cancelled(scope: trio.CancelScope) -> None:
    """Three tasks cancelled by ``scope``: one stops, two fail (two kinds of error)."""
    with unwrapped():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(_fail_when_cancelled, StoreError("disk full"))
            nursery.start_soon(_fail_when_cancelled, LeaseLost("taken over"))
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()


async def test_cancelled_beside_errors_of_several_types_leaves_a_group_of_the_errors() -> None:
    """Such a group stays a group, but an ``ExceptionGroup``: ``except Exception``
    (as :meth:`RunHandle.wait`'s bookkeeping does) sees it, and no ``Cancelled`` hides in it."""
    with trio.CancelScope() as scope, pytest.raises(ExceptionGroup) as caught:
        await _fan_out_failing_as_cancelled(scope)
    assert caught.value.split(trio.Cancelled)[0] is None
    assert sorted(type(e).__name__ for e in caught.value.exceptions) == ["LeaseLost", "StoreError"]
