"""Live events from workers: what a worker publishes for the trees someone follows.

A client that follows a tree (see :mod:`._follow`) adds a row to
``event_followers`` and LISTENs on the tree's channel (:func:`channel`). Two
things then reach it on that channel:

- **saved events**: a trigger on ``events`` NOTIFYs the tree's channel (empty
  payload) for each row of a followed tree, inside the transaction of the save
  that adds it, so the notice is delivered after the commit and costs the
  worker no round trip (PostgreSQL folds repeats of it in one transaction);
  the client then reads the rows by ``seq``;
- **live batches**: every event a worker's runs emit, text deltas included
  (never saved), with its run's depth, sent by :class:`EventPublisher` at most
  :data:`BATCH_S` after it happened, in one ``pg_notify`` statement per batch,
  from a thread on a connection of its own (never on the trio thread, never a
  round trip per event). Each payload stays under :data:`PAYLOAD_MAX` bytes.

Nobody following: the trigger probes one small index and notifies nothing, and
the publisher drops each event after a set lookup (a tree's status is asked
again every :data:`FOLLOW_TTL_S`, at most once per batch, in that batch's
thread call).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import orjson
import psycopg
import trio

from .._events import Event

__all__ = [
    "BATCH_S",
    "FOLLOW_TTL_S",
    "PAYLOAD_MAX",
    "EventPublisher",
    "channel",
    "create_schema",
    "payloads",
]

BATCH_S = 0.04
"""How long a worker gathers live events before sending them (one batch)."""
FOLLOW_TTL_S = 0.25
"""How long a worker trusts what it read of whether a tree is followed."""
PAYLOAD_MAX = 7900
"""Bytes per notification payload (PostgreSQL refuses 8000 and more)."""
BUFFER_MAX = 20_000
"""Live events kept while the database does not take them (then a batch is dropped)."""
_PREFIX = "orchestra_tree_"
_CHANNEL_MAX = 63  # PostgreSQL's identifiers: NAMEDATALEN - 1 bytes

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS event_followers (
        root_id TEXT COLLATE "C" NOT NULL,
        pid INTEGER NOT NULL,
        since DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (root_id, pid)
    )""",
    f"""CREATE OR REPLACE FUNCTION orchestra_channel(root TEXT) RETURNS TEXT
        LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE WHEN octet_length('{_PREFIX}' || root) <= {_CHANNEL_MAX}
            THEN '{_PREFIX}' || root ELSE '{_PREFIX}' || md5(root) END $$""",
    """CREATE OR REPLACE FUNCTION orchestra_notify_event() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM event_followers WHERE root_id = NEW.root_id) THEN
                PERFORM pg_notify(orchestra_channel(NEW.root_id), '');
            END IF;
            RETURN NULL;
        END $$""",
)
"""The followers' table and the trigger's functions (made again harmlessly)."""
_TRIGGER = """CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION orchestra_notify_event()"""
_HAS_TRIGGER = (
    "SELECT 1 FROM pg_trigger WHERE tgname = 'events_notify' AND tgrelid = 'events'::regclass"
)


def channel(root_id: str) -> str:
    """The channel a tree's events are notified on (as ``orchestra_channel`` in SQL)."""
    name = _PREFIX + root_id
    if len(name.encode()) <= _CHANNEL_MAX:
        return name
    return _PREFIX + hashlib.md5(root_id.encode()).hexdigest()  # a name, not a secret


def create_schema(conn: psycopg.Connection[Any]) -> None:
    """Make the followers' table and the trigger on ``events`` if missing, in
    ``conn``'s open transaction (the store's tables exist already); several
    processes may do it at once (an advisory lock serialises them)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('orchestra.notify'))")
    for statement in SCHEMA:
        conn.execute(statement)
    if conn.execute(_HAS_TRIGGER).fetchone() is None:
        conn.execute(_TRIGGER)


def payloads(events: Sequence[Event], worker: str) -> Iterator[str]:
    """``events`` (of one tree, in order) as notification payloads of at most
    :data:`PAYLOAD_MAX` bytes: ``{"w": worker, "e": [[depth, record], ...]}``.

    A text delta too long for one payload is sent in pieces (its tokens with
    the first); another event too long for one is left to the table.
    """
    head = orjson.dumps(worker).join((b'{"w":', b',"e":['))
    parts: list[bytes] = []
    size = len(head) + 2
    for event in events:
        for part in _entries(event, PAYLOAD_MAX - len(head) - 2):
            if parts and size + len(part) + 1 > PAYLOAD_MAX:
                yield (head + b",".join(parts) + b"]}").decode()
                parts, size = [], len(head) + 2
            parts.append(part)
            size += len(part) + 1
    if parts:
        yield (head + b",".join(parts) + b"]}").decode()


def _entries(event: Event, room: int) -> list[bytes]:
    """``event`` as one entry, or a long delta as several; none if it cannot fit."""
    entry = orjson.dumps([event.depth, event.to_dict()])
    if len(entry) <= room:
        return [entry]
    text = event.data.get("text")
    if event.type != "text_delta" or not isinstance(text, str) or len(text) < 2:
        return []
    half = len(text) // 2
    first = attrs.evolve(event, data={**event.data, "text": text[:half]})
    second = attrs.evolve(event, data={**event.data, "text": text[half:], "tokens": 0})
    return _entries(first, room) + _entries(second, room)


@attrs.define(eq=False)
class EventPublisher:
    """A worker's event sink that sends its runs' events to the clients following
    their trees (see the module docstring); :meth:`run` sends them.

    Called on the trio thread for every event (a set lookup for a tree nobody
    follows); nothing is awaited per event.
    """

    database: str
    worker: str
    _buffer: list[Event] = attrs.field(factory=list, init=False)
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    _known: dict[str, tuple[bool, float]] = attrs.field(factory=dict, init=False)
    """Whether each tree is followed, and until when (trio time) that is trusted."""
    _link: _Link = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._link = _Link(self.database, self.worker)

    def __call__(self, event: Event) -> None:
        known = self._known.get(event.root_id)
        if known is not None and not known[0] and known[1] > trio.current_time():
            return
        if len(self._buffer) >= BUFFER_MAX:
            self._buffer.clear()  # the database is not taking them: live events are best-effort
        self._buffer.append(event)
        self._wake.set()

    async def run(self) -> None:
        """Send the gathered events every :data:`BATCH_S` while there are any.

        Cancellation: a checkpoint between batches; a batch being sent (one
        statement, in a thread) is sent before the cancel is seen.
        """
        try:
            # connected before the first batch: a first tree's live events do not
            # wait for a connection (seconds, on a loaded machine) and come after its
            # saved ones (the follower then drops them)
            await trio.to_thread.run_sync(self._link.open)
            while True:
                await self._wake.wait()
                await trio.sleep(BATCH_S)
                self._wake = trio.Event()
                await self.flush()
        finally:
            self.close()

    async def flush(self) -> None:
        """Send what is gathered now (one thread call: who follows, then the batch).

        Cancellation: the thread call is not abandoned: a cancel is seen once
        the batch is sent (or dropped, if the database failed it).
        """
        batch, self._buffer = self._buffer, []
        now = trio.current_time()
        ask = sorted({e.root_id for e in batch if self._known.get(e.root_id, (0, 0.0))[1] <= now})
        known = {root: followed for root, (followed, _) in self._known.items()}
        # in a thread, on a connection of its own: a NOTIFY never waits on the trio loop
        followed = await trio.to_thread.run_sync(self._link.send, batch, ask, known)
        until = trio.current_time() + FOLLOW_TTL_S
        for root in ask:
            self._known[root] = (root in followed, until)

    def close(self) -> None:
        """Close the publisher's connection (a later batch opens another)."""
        self._link.close()


@attrs.define(eq=False)
class _Link:
    """The publisher's own connection (autocommit), used from one thread at a time."""

    database: str
    worker: str
    _conn: psycopg.Connection[Any] | None = attrs.field(default=None, init=False)

    def send(self, batch: list[Event], ask: list[str], known: dict[str, bool]) -> set[str]:
        """Notify ``batch``'s events of the followed trees; the trees in ``ask`` found
        followed. A database error drops the batch (the table keeps saved events)."""
        try:
            conn = self._connection()
            followed = self._followed(conn, ask) if ask else set()
            chosen = [e for e in batch if e.root_id in followed or known.get(e.root_id)]
            notes = [
                (channel(root), text)
                for root, events in _by_tree(chosen)
                for text in payloads(events, self.worker)
            ]
            if notes:
                conn.execute(
                    "SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS n(c, p)",
                    ([c for c, _ in notes], [p for _, p in notes]),
                )
            return followed
        except psycopg.Error:
            self.close()
            return set()

    def open(self) -> None:
        """Connect now if not connected (a failure is left to the first batch)."""
        with contextlib.suppress(psycopg.Error):
            self._connection()

    def _followed(self, conn: psycopg.Connection[Any], roots: list[str]) -> set[str]:
        rows = conn.execute(
            "SELECT DISTINCT root_id FROM event_followers WHERE root_id = ANY(%s)", (roots,)
        ).fetchall()
        return {str(root) for (root,) in rows}

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.database, autocommit=True, application_name="orchestra live", connect_timeout=5
            )
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _by_tree(events: list[Event]) -> list[tuple[str, list[Event]]]:
    """``events`` grouped by tree, each group in its order."""
    groups: dict[str, list[Event]] = {}
    for event in events:
        groups.setdefault(event.root_id, []).append(event)
    return list(groups.items())
