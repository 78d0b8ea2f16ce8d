"""Taking queued runs: announced ones at once, waiting ones when a slot frees up.

The dispatcher's two threads against a fake queue (:class:`FakeQueue`) and
a real database for the announcements (LISTEN/NOTIFY). Its looks on the
clock are an hour apart unless a test is about them, so what a test sees
taken was taken because it was told to. Each wait is for the state the test
needs, with a deadline that says what it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs
import pytest

from orchestra.distributed import PostgresStore
from orchestra.distributed._dispatch import Dispatcher, announce

DEADLINE_S = 30.0
"""Generous: on a loaded machine a notification takes milliseconds."""
HOUR = 3600.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {DEADLINE_S:g} s for {what}")
        time.sleep(0.005)


@attrs.define(eq=False)
class FakeQueue:
    """Queued runs and this worker's running ones, as counts."""

    queued: int = 0
    running_now: int = 0
    looks: int = 0
    fail_next: bool = False
    rooms: list[int] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def running(self) -> int:
        return self.running_now

    def take(self, room: int) -> int:
        with self.lock:
            self.looks += 1
            self.rooms.append(room)
            if self.fail_next:
                self.fail_next = False
                raise OSError("the database is away")
            taken = min(room, self.queued)
            self.queued -= taken
            self.running_now += taken
            return taken

    def add(self, count: int = 1) -> None:
        with self.lock:
            self.queued += count


@attrs.define(eq=False)
class CountingDispatcher(Dispatcher):
    """A dispatcher that counts what told it to look."""

    kicks: int = 0

    def kick(self) -> None:
        self.kicks += 1
        super().kick()


@contextmanager
def dispatching(
    database: str, queue: FakeQueue, *, concurrency: int = 2, idle_look_s: float = HOUR
) -> Iterator[CountingDispatcher]:
    dispatcher = CountingDispatcher(
        database=database, concurrency=concurrency, claims=queue, idle_look_s=idle_look_s
    )
    dispatcher.start()
    try:
        yield dispatcher
    finally:
        dispatcher.stop()


def test_an_announced_run_is_taken_at_once(store: PostgresStore, pg_url: str) -> None:
    queue = FakeQueue()
    with dispatching(pg_url, queue) as dispatcher:
        wait_for(dispatcher.listening.is_set, "the dispatcher to listen")
        told = dispatcher.kicks
        queue.add()
        announce(store)
        wait_for(lambda: dispatcher.kicks > told, "the announcement to arrive")
        wait_for(lambda: queue.queued == 0, "the announced run to be taken")


def test_a_full_worker_takes_a_queued_run_when_a_slot_frees(pg_url: str) -> None:
    queue = FakeQueue(running_now=2)
    with dispatching(pg_url, queue) as dispatcher:
        looked = queue.looks
        queue.add()
        dispatcher.kick()
        assert queue.queued == 1
        queue.running_now = 1  # one ended
        wait_for(lambda: queue.queued == 0, "the run to be taken once a slot freed")
    assert queue.looks > looked
    assert all(room > 0 for room in queue.rooms)  # never a look without room


def test_a_worker_takes_no_more_than_its_free_slots_and_comes_back(pg_url: str) -> None:
    queue = FakeQueue(running_now=1)
    with dispatching(pg_url, queue, concurrency=3) as dispatcher:
        wait_for(lambda: queue.looks >= 1, "the first look")
        queue.add(5)
        dispatcher.kick()
        wait_for(lambda: queue.queued == 3, "two runs taken (two free slots)")
        assert max(queue.rooms) == 2
        queue.running_now = 0  # the three running ended
        wait_for(lambda: queue.queued == 0, "the rest taken as slots freed")


def test_a_look_that_fails_is_made_again_when_told(pg_url: str) -> None:
    queue = FakeQueue(fail_next=True)
    with dispatching(pg_url, queue) as dispatcher:
        wait_for(lambda: queue.looks >= 1, "the first look (it fails)")
        queue.add()
        dispatcher.kick()
        wait_for(lambda: queue.queued == 0, "the run to be taken by the next look")


def test_runs_nobody_announced_are_taken_on_the_clock() -> None:
    queue = FakeQueue()
    with dispatching("postgresql://nobody@127.0.0.1:1/none", queue, idle_look_s=0.05):
        queue.add()  # never announced, and the listener cannot connect
        wait_for(lambda: queue.queued == 0, "a look on the clock")


def test_stop_ends_both_threads(pg_url: str) -> None:
    queue = FakeQueue()
    with dispatching(pg_url, queue) as dispatcher:
        wait_for(dispatcher.listening.is_set, "the dispatcher to listen")
    assert not any(thread.is_alive() for thread in dispatcher._threads)


def test_a_claim_counts_until_dbos_begins_it_and_never_holds_a_slot_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between its claim and its thread's start a workflow is counted by the
    claim; once begun, by DBOS alone (never twice); one that never begins (a
    cancel came first) stops counting after ``STARTING_S``."""
    from types import SimpleNamespace

    from dbos._core import ActiveWorkflowById

    from orchestra.distributed import _dbos

    active = ActiveWorkflowById()
    monkeypatch.setattr(
        "dbos._dbos._get_dbos_instance", lambda: SimpleNamespace(_active_workflows_set=active)
    )
    claims = _dbos._Claims(queue=None)
    now = time.monotonic()
    claims._starting = {"a.0": now, "never.0": now - _dbos.STARTING_S - 1}
    assert claims.running() == 1  # "never" was claimed long ago and did not begin
    began = active.add("a.0", _dbos.QUEUE)
    assert claims.running() == 1  # "a" began: DBOS counts it, the claim no more
    began.release()
    assert claims.running() == 0
