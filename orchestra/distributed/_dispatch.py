"""Taking queued runs: at once when one is queued, not on a fast poll.

DBOS's own queue thread looks for queued workflows every polling interval.
At 10 Hz that cost an idle worker about 4 % of a core (three queries a
look, most of a busy worker's DBOS time too), and a run queued just after a
look still waited for the next one. A worker takes its queue's runs here
instead (DBOS listens to none of its queues):

- every enqueue (a submit, a child queued, a parked parent woken, a dead
  worker's runs queued again) is followed by a ``NOTIFY`` on
  :data:`CHANNEL` (:func:`announce`); each worker LISTENs on it and looks
  at once;
- a worker that was full when something was queued looks again as soon as
  one of its slots is free (it counts them every :data:`FULL_LOOK_S`, in
  memory, no query);
- and every :data:`IDLE_LOOK_S` anyway, since a notification can be missed
  (the listening connection broke, the database restarted).

A look claims at most the worker's free slots (:class:`Claims`: DBOS's own
claim, rows locked with SKIP LOCKED, so workers looking at once take
different runs) and starts what it claimed.

Threads: the listener and the looker are daemon threads of their own; the
trio loop never waits on them. :meth:`Dispatcher.stop` ends both.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import attrs
import psycopg

from .._exceptions import StoreError

__all__ = ["CHANNEL", "IDLE_LOOK_S", "Claims", "Dispatcher", "announce"]

CHANNEL = "orchestra_queued"
"""The channel on which an enqueue is announced (payload: none)."""
IDLE_LOOK_S = 1.0
"""How often a worker looks for queued runs when nothing told it to."""
FULL_LOOK_S = 0.01
"""How often a full worker that knows of queued runs counts its free slots (in
memory, no query)."""
RECONNECT_S = 1.0
"""How soon a listener whose connection failed tries again."""
LISTEN_WAIT_S = 0.5
"""How long the listener waits for a notification before it checks for a stop."""

_log = logging.getLogger(__name__)


class Claims(Protocol):
    """The queue itself (DBOS): how many of this worker's workflows run, and a claim."""

    def running(self) -> int:
        """Workflows of the queue executing in this process now, those just
        claimed included (DBOS counts a workflow only once its thread runs it)."""
        ...

    def take(self, room: int) -> int:
        """Claim and start at most ``room`` queued workflows; how many it started."""
        ...


class _Transactions(Protocol):
    def transaction(self) -> Any: ...


def announce(transactions: _Transactions) -> None:
    """Tell the listening workers that a run was queued (blocking).

    Best effort: a notification that cannot be sent costs its run at most
    :data:`IDLE_LOOK_S` (every worker looks that often anyway)."""
    with contextlib.suppress(StoreError), transactions.transaction() as conn:
        conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))


@attrs.define(kw_only=True, eq=False)
class Dispatcher:
    """One worker's taking of queued runs (see the module's docstring)."""

    database: str
    """Where :data:`CHANNEL` is listened to (the workers' database)."""
    concurrency: int
    claims: Claims
    idle_look_s: float = IDLE_LOOK_S
    listening: threading.Event = attrs.field(factory=threading.Event, init=False)
    """Set while announcements reach this worker."""
    _wanted: threading.Event = attrs.field(factory=threading.Event, init=False)
    _stopping: threading.Event = attrs.field(factory=threading.Event, init=False)
    _pending: bool = attrs.field(default=False, init=False)
    """Whether a run may be queued that this worker has not tried to take."""
    _threads: list[threading.Thread] = attrs.field(factory=list, init=False)

    def start(self) -> None:
        """Start listening and looking (a first look at once)."""
        for name, target in (("listen", self._listen), ("look", self._look_loop)):
            thread = threading.Thread(target=target, name=f"orchestra-queue-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.kick()

    def kick(self) -> None:
        """Something may be queued: look now (thread-safe)."""
        self._pending = True
        self._wanted.set()

    def stop(self) -> None:
        """Stop both threads (each ends within :data:`LISTEN_WAIT_S`)."""
        self._stopping.set()
        self._wanted.set()
        for thread in self._threads:
            thread.join(timeout=2 * LISTEN_WAIT_S)

    # -- the looker ---------------------------------------------------------------

    def _look_loop(self) -> None:
        while not self._stopping.is_set():
            if not self._wanted.wait(self.idle_look_s):
                self._pending = True  # a look on the clock, as if told
            self._wanted.clear()
            while self._pending and not self._stopping.is_set():
                room = self.concurrency - self.claims.running()
                if room <= 0:
                    self._stopping.wait(FULL_LOOK_S)
                    continue
                self._pending = False
                if self._take(room) >= room:  # maybe more: look again once there is room
                    self._pending = True

    def _take(self, room: int) -> int:
        try:
            return self.claims.take(room)
        except Exception as exc:  # the database away, a lock: the next look tries again
            if not self._stopping.is_set():
                _log.warning("worker: cannot take queued runs now: %s", exc)
            return 0

    # -- the listener -------------------------------------------------------------

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                with self._listening() as notifications:
                    self.kick()  # anything queued while this did not listen
                    self.listening.set()
                    for _ in notifications:
                        self.kick()
            except psycopg.Error:
                self._stopping.wait(RECONNECT_S)
            finally:
                self.listening.clear()

    @contextlib.contextmanager
    def _listening(self) -> Iterator[Iterator[object]]:
        with psycopg.connect(self.database, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            yield self._notifications(conn)

    def _notifications(self, conn: psycopg.Connection[Any]) -> Iterator[object]:
        while not self._stopping.is_set():
            yield from conn.notifies(timeout=LISTEN_WAIT_S)
