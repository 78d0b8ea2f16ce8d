"""The stall watch: a freeze of the loop is noticed before any task takes a step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import trio

from orchestra.distributed._stall import StallWatch


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


def test_an_io_wait_that_overran_its_timeout_is_a_stall(clock: _Clock) -> None:
    stalls: list[float] = []
    watch = StallWatch(1.0, stalls.append)
    watch.before_io_wait(5.0)
    clock.now += 5.5  # a long wait, as asked: no stall
    watch.after_io_wait(5.0)
    assert stalls == []
    watch.before_io_wait(0.2)
    clock.now += 8.2  # frozen while it waited
    watch.after_io_wait(0.2)
    assert stalls == [pytest.approx(8.0)]


def test_a_gap_between_task_steps_is_a_stall_once(clock: _Clock) -> None:
    stalls: list[float] = []
    watch = StallWatch(1.0, stalls.append)
    task: object = None
    watch.after_task_step(task)  # type: ignore[arg-type]
    clock.now += 0.5
    watch.before_task_step(task)  # type: ignore[arg-type]
    assert stalls == []
    clock.now += 3.0
    watch.before_task_step(task)  # type: ignore[arg-type]
    watch.before_task_step(task)  # type: ignore[arg-type]
    assert stalls == [pytest.approx(3.0)]


def test_a_sigstopped_loop_calls_on_stall_before_its_sleeper_goes_on() -> None:
    """A real freeze: the process stops itself (a child sends SIGCONT 1.5 s later);
    on waking, the watch fires before the task whose sleep ended takes a step."""
    order: list[str] = []

    async def main() -> None:
        watch = StallWatch(0.5, lambda seconds: order.append(f"stall {seconds:.0f}"))
        trio.lowlevel.add_instrument(watch)
        try:
            async with trio.open_nursery() as nursery:

                async def sleeper() -> None:
                    await trio.sleep(0.2)
                    order.append("sleeper went on")

                nursery.start_soon(sleeper)
                await trio.sleep(0.05)
                os.kill(os.getpid(), signal.SIGSTOP)
        finally:
            trio.lowlevel.remove_instrument(watch)

    waker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, time; time.sleep(1.5); os.kill({os.getpid()}, {int(signal.SIGCONT)})",
        ]
    )
    trio.run(main)
    waker.wait(10)
    assert order[0].startswith("stall") and order[1:] == ["sleeper went on"], order
