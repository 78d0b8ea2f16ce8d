"""Following a tree that workers execute: its events as they happen (client side).

:class:`Follower` registers in ``event_followers`` (so workers publish the
tree's live events, and the trigger on ``events`` notifies its saves: see
:mod:`._notify`) and LISTENs on the tree's channel, on one connection of its
own. Each :meth:`Follower.poll` takes the notifications that came, reads the
table after a saved-event notice (and at least every :data:`READ_EVERY_S`,
so a notice missed, e.g. while the connection was being remade, costs
nothing but time), and returns the merged events (:mod:`._merge`), each with
its run's depth, as embedded readers get them.

Reading the table by ``seq`` alone could skip rows: two workers' saves of one
tree take their ``seq`` values in one order and may commit in the other. So a
read returns every row above a low-water mark whose ``seq`` was not seen yet,
and the mark only moves past the rows of a read once every transaction that
was in progress at that read has ended (PostgreSQL's snapshot bounds say so:
``xmax`` then, ``xmin`` now).

:func:`stream` drives a follower into a sink until the tree's root stops
(the command line's ``--json-events``, live view and ``--trace``);
:func:`tree_events` is the same as a trio async iterator (a
``RunHandle.events()``-style reader).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import psycopg
import trio
from psycopg import sql

from .._events import Event, EventSink
from .._exceptions import StoreError, StoreUnreachable
from .._state import Status
from ._merge import TreeMerge
from ._notify import channel, create_schema

__all__ = ["READ_EVERY_S", "Follower", "stream", "tree_events"]

READ_EVERY_S = 1.0
"""The table is read at least this often (a notice may be missed)."""
TICK_S = 0.05
"""Longest wait for notifications in :func:`stream` between two checks."""
SETTLED_S = 10.0
"""A read's rows count as settled this long after it, whatever the snapshots say."""
STOPPED_GRACE_S = 0.5
"""How long after the root's saved status says it stopped its live events may
still come (its own ``run_stopped`` ends the wait)."""
AWAY_LIMIT_S = 120.0
"""How long :func:`stream` keeps trying to reach an unreachable database."""

_READ = """
    SELECT s.xmin, s.xmax, s.status, e.seq, e.data
    FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
                 pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
                 (SELECT status FROM runs WHERE run_id = %(root)s) AS status) s
    LEFT JOIN events e ON e.root_id = %(root)s AND e.seq > %(low)s
    ORDER BY e.seq
"""
"""The tree's rows above the mark, the root's status and the snapshot's bounds,
from one snapshot."""


_FORGET_GONE = """
    DELETE FROM event_followers
    WHERE pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
"""
"""Registrations of followers whose session is gone (killed, or cut off by a restart)."""


class Follower:
    """One client's view of one tree's events (see the module docstring).

    Raises (from every method but :meth:`close`):
        StoreUnreachable: the database cannot be reached (:meth:`open` again
            to go on: nothing saved is lost).
        StoreError: another database error.
    """

    def __init__(self, database: str, root_id: str) -> None:
        self.database = database
        self.root_id = root_id
        self.merge = TreeMerge(root_id, self._depth_from_store)
        self.root_status: str | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._low = 0
        self._seen: set[int] = set()
        self._marks: deque[tuple[int, int, float]] = deque()
        """(xmax, highest seq seen, when) of each read whose rows are not settled."""
        self._read_at = -math.inf
        self._stopped_at: float | None = None

    def open(self) -> Follower:
        """Connect, LISTEN, and register as a follower of the tree (before its
        root is submitted, so that no event of it is published to nobody)."""
        self.close()
        with self._errors("start following"):
            self._conn = psycopg.connect(
                self.database, autocommit=True, application_name="orchestra follow"
            )
            # listening before registering: nothing sent to followers is missed
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(self.root_id))))
            with self._conn.transaction():
                create_schema(self._conn)
                self._conn.execute(_FORGET_GONE)
                self._conn.execute(
                    "INSERT INTO event_followers (root_id, pid, since)"
                    " VALUES (%s, pg_backend_pid(), %s) ON CONFLICT DO NOTHING",
                    (self.root_id, time.time()),
                )
        self._read_at = -math.inf  # read at once: a notice may have gone meanwhile
        return self

    def close(self) -> None:
        """Stop following (the registration goes with the connection); never raises."""
        conn, self._conn = self._conn, None
        if conn is None or conn.closed:
            return
        with contextlib.suppress(psycopg.Error):
            conn.execute(
                "DELETE FROM event_followers WHERE root_id = %s AND pid = pg_backend_pid()",
                (self.root_id,),
            )
        conn.close()

    @property
    def done(self) -> bool:
        """Whether the root stopped: its ``run_stopped`` was shown, or its saved
        status said so :data:`STOPPED_GRACE_S` ago (a run stopped in the database
        has no ``run_stopped``)."""
        if self.merge.root_stopped:
            return True
        return (
            self._stopped_at is not None and time.monotonic() > self._stopped_at + STOPPED_GRACE_S
        )

    def poll(self, timeout: float) -> list[Event]:
        """The events ready within ``timeout`` seconds (returns early when some are)."""
        now = time.monotonic()
        due = self.merge.next_due()
        wait = timeout if due is None else max(0.0, min(timeout, due - now))
        wait = min(wait, max(0.0, self._read_at + READ_EVERY_S - now))
        with self._errors("wait for events"):
            saved = self._take_notices(wait)
        if saved or time.monotonic() >= self._read_at + READ_EVERY_S:
            self.read()
        self.merge.release(time.monotonic())
        return self.merge.take()

    def finish(self) -> list[Event]:
        """Read the table once more and show everything held; the last events."""
        self.read()
        self.merge.release(math.inf)
        return self.merge.take()

    def read(self) -> None:
        """Read the tree's rows not seen yet (see the module docstring)."""
        with self._errors("read events"):
            rows = self._connection().execute(_READ, {"root": self.root_id, "low": self._low})
            found = rows.fetchall()
        self._read_at = time.monotonic()
        if not found:
            return
        xmin, xmax, self.root_status = found[0][0], found[0][1], found[0][2]
        stopped = self.root_status not in (None, Status.RUNNING.value)  # None: not submitted yet
        if stopped and self._stopped_at is None:
            self._stopped_at = self._read_at
        fresh = [(seq, data) for *_, seq, data in found if seq is not None]
        fresh = [(seq, data) for seq, data in fresh if seq not in self._seen]
        self._seen.update(seq for seq, _ in fresh)
        self.merge.saved([orjson.loads(data) for _, data in fresh], self._read_at)
        self._settle(int(xmin), int(xmax))

    def _settle(self, xmin: int, xmax: int) -> None:
        """Move the low-water mark past the rows of earlier reads whose concurrent
        transactions have all ended (or that are :data:`SETTLED_S` old: a save
        lasts milliseconds, and a session of ours idle in a transaction is ended
        after 2 s; another's long transaction must not hold the mark for ever)."""
        now = time.monotonic()
        self._marks.append((xmax, max(self._seen, default=self._low), now))
        while self._marks and (self._marks[0][0] <= xmin or self._marks[0][2] < now - SETTLED_S):
            self._low = max(self._low, self._marks.popleft()[1])
        self._seen = {seq for seq in self._seen if seq > self._low}

    def _take_notices(self, wait: float) -> bool:
        """Feed the live batches that come within ``wait`` to the merge (returning
        early after the first); whether a saved-event notice came."""
        saved = False
        conn = self._connection()
        for stop_after, timeout in ((1, wait), (None, 0.0)):
            for note in conn.notifies(timeout=timeout, stop_after=stop_after):
                if not note.payload:
                    saved = True
                    continue
                entries = orjson.loads(note.payload)["e"]
                self.merge.live([(depth, record) for depth, record in entries])
        return saved

    def _depth_from_store(self, run_id: str) -> int:
        """A run's depth from its saved lineage (its parent ids)."""
        depth, current = 0, run_id
        with self._errors(f"read the lineage of run {run_id!r}"):
            conn = self._connection()
            while True:
                row = conn.execute("SELECT parent_id FROM runs WHERE run_id = %s", (current,))
                found = row.fetchone()
                if found is None or found[0] is None:
                    return depth
                depth, current = depth + 1, str(found[0])

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            raise StoreUnreachable(f"the follower of tree {self.root_id} is not connected")
        return self._conn

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """psycopg's errors as ours (a broken connection: unreachable)."""
        try:
            yield
        except psycopg.Error as exc:
            text = " ".join(str(exc).split())
            if self._conn is None or self._conn.closed or isinstance(exc, psycopg.OperationalError):
                raise StoreUnreachable(f"cannot {doing} from PostgreSQL: {text}") from exc
            raise StoreError(f"PostgreSQL: cannot {doing}: {text}") from exc


def stream(
    follower: Follower,
    sink: EventSink,
    *,
    away: Callable[[StoreUnreachable], None],
    tick: Callable[[], None] = lambda: None,
) -> None:
    """Feed ``follower``'s events to ``sink`` until the tree's root stops.

    While the database is away the follower connects again (``away`` is told
    of each failure and may raise to give up); nothing saved is lost. ``tick``
    is called between two polls (at least every :data:`TICK_S`).
    """
    while not follower.done:
        try:
            tick()
            events = follower.poll(TICK_S)
        except StoreUnreachable as exc:
            away(exc)
            time.sleep(min(1.0, TICK_S * 10))
            with contextlib.suppress(StoreUnreachable):
                follower.open()
            continue
        for event in events:
            sink(event)
    for event in follower.finish():
        sink(event)


async def tree_events(database: str, root_id: str) -> AsyncIterator[Event]:
    """Every event of the tree ``root_id`` (executed by workers) as it happens,
    each with its run's depth (``Event.depth``), until the root stops: a
    ``RunHandle.events()``-style reader.

    Cancellation: a checkpoint per event and at least every :data:`TICK_S`
    (a wait for the database in progress ends first).

    Raises:
        StoreUnreachable: the database cannot be reached.
    """
    follower = Follower(database, root_id)
    try:
        # psycopg's LISTEN connection is blocking: each wait for notes is a thread's
        await trio.to_thread.run_sync(follower.open)
        while not follower.done:
            for event in await trio.to_thread.run_sync(follower.poll, TICK_S):
                yield event
        for event in await trio.to_thread.run_sync(follower.finish):
            yield event
    finally:
        # shielded: a reader that went away still UNLISTENs and drops its follow row
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(follower.close)
