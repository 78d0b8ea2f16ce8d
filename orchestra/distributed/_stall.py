"""Noticing, at once, that this process was frozen.

A worker stopped for a while (``SIGSTOP``, a frozen VM, a long pause) may
have been declared dead by its peers, who then continue its runs. Its
heartbeat finds out within a beat of waking; until then its trio tasks would
go on where they were (a tool past its sleep, about to write). Fencing keeps
every save and ledger decision of such a worker out, but not a tool's own
effect: so the first thing the loop does after a freeze is to ask whether
this worker is still alive.

:class:`StallWatch` is a trio instrument: it sees every I/O wait and every
task step of the loop. An I/O wait that overran its timeout by more than
``threshold`` seconds, or more than ``threshold`` seconds within a task step
or between two, is a freeze; ``on_stall`` is then called synchronously,
before any other task takes another step (the worker checks its row and
exits if it was declared dead).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

__all__ = ["StallWatch"]


class StallWatch(trio.abc.Instrument):
    """Calls ``on_stall(seconds)`` when the loop was frozen for more than ``threshold`` s."""

    def __init__(self, threshold: float, on_stall: Callable[[float], None]) -> None:
        self.threshold = threshold
        self.on_stall = on_stall
        self._last = time.monotonic()
        self._waiting: tuple[float, float] | None = None

    def before_io_wait(self, timeout: float) -> None:
        self._waiting = (time.monotonic(), timeout)

    def after_io_wait(self, timeout: float) -> None:
        now = time.monotonic()
        if self._waiting is not None:
            began, allowed = self._waiting
            self._waiting = None
            self._check(now - began - allowed, now)
        self._last = now

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        now = time.monotonic()
        self._check(now - self._last, now)
        self._last = now

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        now = time.monotonic()  # a step that took that long was frozen (or blocked)
        self._check(now - self._last, now)
        self._last = now

    def _check(self, overrun: float, now: float) -> None:
        if overrun > self.threshold:
            self._last = now  # one call per freeze
            self.on_stall(overrun)
