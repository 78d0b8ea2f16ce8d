"""The body the two SQL stores share (SQLite, PostgreSQL), over a small dialect.

:class:`SQLStore` implements the store contract (see :mod:`.contract`) once:
runs with append-only transcripts, events, cancel requests and fenced leases.
A subclass brings its database:

- ``_write(doing)``: one write transaction (its errors mapped to ``StoreError``),
  yielding a DB-API connection; ``_read(doing, sql, *params)``: one query;
- ``_states(doing, where, *params)``: the states (transcripts joined) of the
  runs a ``WHERE`` clause on ``runs r`` selects, from one snapshot;
- ``_on_commit(callback)``: run a callback once the open transaction commits;
- ``_lock_lease(conn, root_id)``: serialise takings of one tree's lease;
- its SQL where the dialects differ (the ``SQL_*`` class attributes it
  overrides), and ``PLACEHOLDER``: statements here are written with ``?``
  and turned into the dialect's once, when the subclass is made.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Protocol, Self

import orjson

from .._events import EventRecord
from .._exceptions import ConfigError, RunNotFound
from .._state import RunState
from . import fence as fences
from . import shared
from .contract import StreamNote
from .fence import Fence
from .transcripts import MessageRow, RunRow, SavedTranscripts, store_rows

__all__ = ["Connection", "SQLStore"]


class Cursor(Protocol):
    """What the stores use of a DB-API cursor."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Any: ...


class Connection(Protocol):
    """What the stores use of a DB-API connection (sqlite3's, psycopg's)."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor: ...

    def cursor(self) -> Cursor: ...


class SQLStore:
    """Run states, events, cancel requests and leases in a SQL database (see the module)."""

    PLACEHOLDER: ClassVar[str] = "?"

    SQL_UPSERT_RUN: ClassVar[str] = """
        -- a run's root, parent, agent and creation time never change: not rewritten
        INSERT INTO runs
            (run_id, root_id, parent_id, agent, status, created_at, updated_at, state, messages)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (run_id) DO UPDATE SET
            status = excluded.status, updated_at = excluded.updated_at,
            state = excluded.state, messages = excluded.messages
    """
    SQL_INSERT_MESSAGE: ClassVar[str] = "INSERT INTO messages (run_id, idx, data) VALUES (?, ?, ?)"
    SQL_DROP_MESSAGES: ClassVar[str] = "DELETE FROM messages WHERE run_id = ? AND idx >= ?"
    SQL_INSERT_EVENT: ClassVar[str] = (
        "INSERT INTO events (run_id, root_id, type, at, data) VALUES (?, ?, ?, ?, ?)"
    )
    SQL_ROOT_OF: ClassVar[str] = "SELECT root_id FROM runs WHERE run_id = ?"
    SQL_UPSERT_CANCEL: ClassVar[str] = """
        INSERT INTO cancels (run_id, root_id, reason, requested_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (run_id) DO UPDATE SET
            reason = excluded.reason, requested_at = excluded.requested_at
    """
    SQL_LEASE: ClassVar[str] = "SELECT owner, expires_at FROM leases WHERE root_id = ?"
    """The lease row a taking or a renewal decides on (locked where the dialect can)."""
    SQL_TAKE_LEASE: ClassVar[str] = """
        INSERT INTO leases (root_id, owner, expires_at, epoch) VALUES (?, ?, ?, 1)
        ON CONFLICT (root_id) DO UPDATE SET
            owner = excluded.owner, expires_at = excluded.expires_at, epoch = leases.epoch + 1
        RETURNING epoch
    """
    SQL_RELEASE_LEASE: ClassVar[str] = (
        "UPDATE leases SET owner = '', expires_at = 0 WHERE root_id = ? AND owner = ?"
    )
    """A released lease keeps its row (no owner, expired), so a tree's epoch never goes back."""
    SQL_RENEW_LEASE: ClassVar[str] = "UPDATE leases SET expires_at = ? WHERE root_id = ?"
    SQL_PUT_LIVE: ClassVar[str] = """
        INSERT INTO live_text (run_id, root_id, text, at, tokens, prompt, cap)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (run_id) DO UPDATE SET text = excluded.text, at = excluded.at,
            tokens = excluded.tokens, prompt = excluded.prompt, cap = excluded.cap
    """
    SQL_DROP_LIVE: ClassVar[str] = "DELETE FROM live_text WHERE run_id = ?"
    SQL_DROP_CANCEL: ClassVar[str] = "DELETE FROM cancels WHERE run_id = ?"
    SQL_DROP_CANCELS: ClassVar[str] = "DELETE FROM cancels WHERE root_id = ?"
    SQL_FENCES: ClassVar[dict[str, str]] = {
        "lease": "SELECT owner, epoch FROM leases WHERE root_id = ?",
    }
    """Where each kind of fence's holder and epoch are kept (a kind missing: never granted)."""
    FENCE_CHECK: ClassVar[str | None] = None
    """A statement that checks a fence in the database itself, raising if it is not
    current, given ``(scope, key, holder, epoch)``; its result is never read, so
    it can go with the writes it guards. None: the fence's row is read
    (:attr:`SQL_FENCES`) and checked here."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.PLACEHOLDER == "?":
            return
        for name, sql in vars(SQLStore).items():
            if name.startswith("SQL_") and name not in cls.__dict__:
                converted = (
                    {key: _placeheld(text, cls.PLACEHOLDER) for key, text in sql.items()}
                    if isinstance(sql, dict)
                    else _placeheld(sql, cls.PLACEHOLDER)
                )
                setattr(cls, name, converted)

    def __init__(self) -> None:
        self._saved = SavedTranscripts()

    @property
    def shown(self) -> str:
        """The store as messages show it (never a password)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    @property
    def inbox(self) -> Self:
        """This store keeps cancel requests (a :class:`~.contract.CancelInbox`)."""
        return self

    @property
    def leases(self) -> Self:
        """This store keeps leases (a :class:`~.contract.Leases`)."""
        return self

    @property
    def stream_notes(self) -> Self:
        """This store keeps the text runs stream (a :class:`~.contract.StreamNotes`)."""
        return self

    def note_stream(self, run_id: str, root_id: str, stream: StreamNote | None) -> None:
        """Note what run ``run_id`` is streaming now (None: it is not)."""
        with self._write(f"note what run {run_id!r} streams") as conn:
            if stream is None:
                conn.execute(self.SQL_DROP_LIVE, (run_id,))
                return
            row = (run_id, root_id, stream.text, time.time(), *stream.counts)
            conn.execute(self.SQL_PUT_LIVE, row)

    def stream_note(self, run_id: str) -> StreamNote | None:
        """What run ``run_id`` was streaming when last noted, if it was."""
        rows = self._read(
            f"read the stream note of run {run_id!r}",
            "SELECT text, tokens, prompt, cap FROM live_text WHERE run_id = ?",
            run_id,
        )
        if not rows:
            return None
        text, tokens, prompt, cap = rows[0]
        return StreamNote(text=str(text), tokens=int(tokens), prompt=int(prompt), cap=int(cap))

    def streaming_texts(self, root_id: str) -> dict[str, str]:
        """What each run of the tree ``root_id`` is streaming now, by run id."""
        rows = self._read(
            f"read the stream notes of tree {root_id!r}",
            "SELECT run_id, text FROM live_text WHERE root_id = ?",
            root_id,
        )
        return {str(run_id): str(text) for run_id, text in rows}

    # -- what a dialect brings ----------------------------------------------

    def _write(self, doing: str) -> contextlib.AbstractContextManager[Connection]:
        raise NotImplementedError

    def _read(self, doing: str, sql: str, *params: object) -> list[Any]:
        """The rows of one query (``sql`` with ``?`` placeholders)."""
        raise NotImplementedError

    def _states(self, doing: str, where: str, *params: object) -> list[RunState]:
        """The states of the runs ``where`` (on ``runs r``, ``?`` placeholders) selects."""
        raise NotImplementedError

    def _prefix(self, prefix: str) -> tuple[str, tuple[object, ...]]:
        """The WHERE clause (and its parameters) of the run ids ``prefix`` starts."""
        raise NotImplementedError

    def _on_commit(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    def _create_schema(self) -> None:
        """Create the tables if missing, or check (and migrate) their version."""
        raise NotImplementedError

    def _create_schema_or_close(self) -> None:
        try:
            self._create_schema()
        except BaseException:
            self.close()
            raise

    def _states_in(self, conn: Any, where: str, *params: object) -> list[RunState]:
        """:meth:`_states`, read in ``conn``'s open transaction."""
        raise NotImplementedError

    def _lock_run(self, conn: Any, run_id: str) -> None:
        """Hold the run's row until the transaction ends (nothing to do where a
        write transaction already holds the whole database)."""

    def _lock_lease(self, conn: Connection, root_id: str) -> None:
        """Serialise the takings of one tree's lease (nothing to do where a write
        transaction already holds the whole database)."""

    # -- runs -------------------------------------------------------------

    def save(
        self, state: RunState, events: Sequence[EventRecord] = (), *, fence: Fence | None = None
    ) -> None:
        """Insert or replace the state of ``state.run_id`` and append ``events``, atomically.

        With ``fence`` (a lease from :meth:`acquire_lease`, or a worker's claim),
        the save is *fenced*: it happens only if that fence, at that epoch, is
        still the current one, checked in the same transaction. A writer that
        stalled past its lease or claim and lost it to another can therefore
        never save over the new holder's state. Only the messages added since
        this store last saved the run are written (the whole transcript if it
        does not extend that one).

        Raises:
            LeaseLost: ``fence`` was given and is not current.
            StateError: the state or an event cannot be stored as JSON.
        """
        self.save_many([state], events, fence=fence)

    def save_many(
        self,
        states: Sequence[RunState],
        events: Sequence[EventRecord] = (),
        *,
        fence: Fence | None = None,
    ) -> None:
        """Save several states and ``events`` in one transaction (fenced as :meth:`save`).

        All or none: e.g. every run of a tree stopped by one cancel.

        Raises:
            LeaseLost: ``fence`` was given and is not current.
            StateError: a state or an event cannot be stored as JSON.
        """
        event_rows = [shared.event_row(event) for event in events]
        writes = [store_rows(self._saved, state) for state in states]  # encoded before the lock
        doing = f"save run {states[0].run_id!r}" if len(states) == 1 else f"save {len(states)} runs"
        with self._write(doing) as conn:
            if fence is not None:
                self._check_fence(conn, fence)
            self._write_rows(conn, writes, event_rows)
            self._on_commit(lambda: self._written(states))

    def update(self, run_id: str, change: Callable[[RunState], RunState | None]) -> RunState:
        """Read the saved state of ``run_id`` and save ``change``'s version of it, in
        one transaction holding the run's row against every other writer.

        ``change`` gets the state as saved now and returns the state to save, or
        None to write nothing; what it raises leaves everything as it was.
        Returns the state saved (or read, if nothing was written).

        Raises:
            RunNotFound: no run with this id.
        """
        with self._write(f"update run {run_id!r}") as conn:
            self._lock_run(conn, run_id)
            found = self._states_in(conn, "r.run_id = ?", run_id)
            if not found:
                raise RunNotFound(f"no run {run_id!r} in {self.shown}")
            changed = change(found[0])
            if changed is None:
                return found[0]
            self._write_rows(conn, [store_rows(self._saved, changed)], [])
            self._on_commit(lambda: self._written([changed]))
        return changed

    def _write_rows(
        self,
        conn: Connection,
        writes: Sequence[tuple[RunRow, int, list[MessageRow]]],
        event_rows: Sequence[tuple[str, str, str, float, str]],
    ) -> None:
        """Write runs (as :func:`store_rows` made them: their transcripts appended)
        and events in ``conn``'s transaction."""
        conn.cursor().executemany(self.SQL_UPSERT_RUN, [row for row, _, _ in writes])
        # a whole transcript replaces whatever is stored (dropped before any insert)
        wholes = [(row[0], 0) for row, start, _ in writes if start == 0]
        if wholes:
            conn.cursor().executemany(self.SQL_DROP_MESSAGES, wholes)
        message_rows = [row for _, _, rows in writes for row in rows]
        if message_rows:
            conn.cursor().executemany(self.SQL_INSERT_MESSAGE, message_rows)
        if event_rows:
            conn.cursor().executemany(self.SQL_INSERT_EVENT, event_rows)
        # a saved run is not streaming: what its stream cost is in the state saved here
        conn.cursor().executemany(self.SQL_DROP_LIVE, [(row[0],) for row, _, _ in writes])

    def _written(self, states: Iterable[RunState]) -> None:
        for state in states:
            self._saved.written(state)

    def load(self, run_id: str) -> RunState:
        """The last saved state of ``run_id``.

        Raises:
            RunNotFound: no run with this id.
            SchemaVersionError: it was saved by an unknown run-state schema version.
        """
        states = self._states(f"load run {run_id!r}", "r.run_id = ?", run_id)
        if not states:
            raise RunNotFound(f"no run {run_id!r} in {self.shown}")
        return states[0]

    def tree(self, root_id: str) -> list[RunState]:
        """Every run of the tree rooted at ``root_id``: the root, then by creation time.

        Raises:
            RunNotFound: no run belongs to this tree.
        """
        states = self._states(
            f"load tree {root_id!r}",
            "r.root_id = ? ORDER BY r.run_id <> r.root_id, r.created_at, r.run_id",
            root_id,
        )
        if not states:
            raise RunNotFound(f"no run tree {root_id!r} in {self.shown}")
        return states

    def list_runs(self, *, limit: int = 50, roots_only: bool = True) -> list[RunState]:
        """Up to ``limit`` runs, most recently updated first (only roots by default)."""
        shared.check_limit(limit)
        where = "r.run_id = r.root_id" if roots_only else "1 = 1"
        return self._states(
            "list runs", f"{where} ORDER BY r.updated_at DESC, r.run_id LIMIT ?", limit
        )

    def resolve(self, prefix: str) -> str:
        """The run id that ``prefix`` starts (an exact id always wins).

        Raises:
            ConfigError: the prefix is empty.
            RunNotFound: no run id starts with it.
            StateError: several do (the message lists some).
        """
        if not prefix:
            raise ConfigError("a run id prefix must not be empty")
        where, params = self._prefix(prefix)
        rows = self._read(
            f"resolve run id prefix {prefix!r}",
            f"SELECT run_id FROM runs WHERE {where} ORDER BY run_id LIMIT 6",
            *params,
        )
        return shared.pick_run_id(prefix, [run_id for (run_id,) in rows], self.shown)

    # -- events -----------------------------------------------------------

    def add_events(self, events: Iterable[EventRecord], *, fence: Fence | None = None) -> None:
        """Append events, all or none, in one transaction (fenced as :meth:`save`).

        Each event needs ``run_id``, ``root_id``, ``type`` and ``at``; the whole
        dict is kept (as JSON) and comes back from :meth:`events`.

        Raises:
            LeaseLost: ``fence`` was given and is not current.
            StateError: an event lacks a key or is not JSON-serialisable.
        """
        rows = [shared.event_row(event) for event in events]
        if not rows:
            return
        with self._write(f"add {len(rows)} events") as conn:
            if fence is not None:
                self._check_fence(conn, fence)
            conn.cursor().executemany(self.SQL_INSERT_EVENT, rows)

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[EventRecord]:
        """Stored events in the order they were added, optionally of one run or tree.

        The order is that of the events' sequence numbers, taken as they are
        inserted: for one tree (saved by one process at a time), the order of
        the saves that added them. A run's events are found through its tree's
        index (a run with no saved state, whose tree is not known, only has
        events added by hand: those are scanned for).
        """
        if run_id is not None and root_id is None:
            found = self._read("find a run's tree", SQLStore.SQL_ROOT_OF, run_id)
            root_id = found[0][0] if found else None
        given = {"root_id": root_id, "run_id": run_id}
        chosen = {column: value for column, value in given.items() if value is not None}
        where = " AND ".join(f"{column} = ?" for column in chosen) or "1 = 1"
        rows = self._read(
            "read events", f"SELECT data FROM events WHERE {where} ORDER BY seq", *chosen.values()
        )
        return [orjson.loads(data) for (data,) in rows]

    # -- cancel requests --------------------------------------------------

    def request_cancel(self, run_id: str, reason: str) -> None:
        """Ask whichever process runs ``run_id``'s tree to cancel that run.

        A newer request for the same run replaces the older one's reason.

        Raises:
            RunNotFound: no run with this id.
        """
        with self._write(f"request cancel of run {run_id!r}") as conn:
            found = conn.execute(self.SQL_ROOT_OF, (run_id,)).fetchone()
            if found is None:
                raise RunNotFound(f"no run {run_id!r} in {self.shown}")
            conn.execute(self.SQL_UPSERT_CANCEL, (run_id, found[0], reason, time.time()))

    def pending_cancels(self, root_id: str | None = None) -> dict[str, str]:
        """Cancel requests for runs of the tree ``root_id`` (of every tree if None):
        reason by run id, oldest first."""
        if root_id is None:
            return self._cancels("'every tree'", "1 = 1")
        return self._cancels(repr(root_id), "root_id = ?", root_id)

    def _cancels(self, which: str, where: str, *params: object) -> dict[str, str]:
        rows = self._read(
            f"read cancel requests of {which}",
            f"SELECT run_id, reason FROM cancels WHERE {where} ORDER BY requested_at, run_id",
            *params,
        )
        return dict(rows)

    def clear_cancel(self, run_id: str) -> None:
        """Forget the cancel request for ``run_id`` (if any): it has been applied."""
        with self._write(f"clear cancel of run {run_id!r}") as conn:
            conn.execute(self.SQL_DROP_CANCEL, (run_id,))

    def clear_cancels(self, root_id: str) -> None:
        """Forget every cancel request of the tree ``root_id``.

        Done when a process takes the tree and when it lets it go, so a request
        that no process applied (its holder died, or the tree finished first)
        never stops a later resume.
        """
        with self._write(f"clear cancel requests of {root_id!r}") as conn:
            self._clear_cancels(conn, root_id)

    def _clear_cancels(self, conn: Connection, root_id: str) -> None:
        conn.execute(self.SQL_DROP_CANCELS, (root_id,))

    # -- leases -----------------------------------------------------------

    def acquire_lease(
        self, root_id: str, owner: str, ttl: float = 30.0, now: float | None = None
    ) -> Fence:
        """Own the tree ``root_id`` for ``ttl`` seconds; the fence of this taking.

        Succeeds when nobody holds the lease, when ``owner`` already does (the
        lease is extended), or when the holder's lease has expired (or its
        process on this host is gone). Every taking gets the next epoch, so a
        fence from an earlier one (even the same owner's) no longer passes.
        The check and the claim are one transaction that no other taking of
        this lease can interleave with, so of several processes racing for a
        lease exactly one wins.

        Raises:
            LeaseError: another owner holds an unexpired lease.
        """
        now = shared.now_or(now)
        expires_at = now + shared.checked_ttl(ttl)
        with self._write(f"acquire lease on {root_id!r}") as conn:
            self._lock_lease(conn, root_id)
            held = self._lease_of(conn, root_id)
            if held is not None and held[0] != owner and held[1] > now and shared.alive(held[0]):
                raise shared.held_by(root_id, held, now)
            (epoch,) = conn.execute(self.SQL_TAKE_LEASE, (root_id, owner, expires_at)).fetchone()
        return Fence(scope="lease", key=root_id, holder=owner, epoch=int(epoch))

    def renew_lease(
        self, root_id: str, owner: str, ttl: float = 30.0, now: float | None = None
    ) -> None:
        """Extend ``owner``'s lease on ``root_id`` to ``ttl`` seconds from now.

        An expired lease that nobody else has taken can still be renewed.

        Raises:
            LeaseError: ``owner`` does not hold the lease (any more).
        """
        now = shared.now_or(now)
        expires_at = now + shared.checked_ttl(ttl)
        with self._write(f"renew lease on {root_id!r}") as conn:
            held = self._lease_of(conn, root_id)
            if held is None or held[0] != owner:
                raise shared.not_held(root_id, owner, held, now)
            conn.execute(self.SQL_RENEW_LEASE, (expires_at, root_id))

    def lease_holder(self, root_id: str, now: float | None = None) -> str | None:
        """Who runs the tree ``root_id`` now: the owner of an unexpired lease held by a
        live process, or ``None`` (nobody: never run, finished, or its process died)."""
        now = shared.now_or(now)
        rows = self._read(
            f"read the lease on {root_id!r}",
            "SELECT owner, expires_at FROM leases WHERE root_id = ?",
            root_id,
        )
        if not rows or not rows[0][0] or rows[0][1] <= now or not shared.alive(rows[0][0]):
            return None
        return str(rows[0][0])

    def let_go(self, root_id: str, owner: str) -> None:
        """:meth:`clear_cancels` and :meth:`release_lease` in one transaction (a tree stopped)."""
        with self._write(f"let go of {root_id!r}") as conn:
            self._clear_cancels(conn, root_id)
            conn.execute(self.SQL_RELEASE_LEASE, (root_id, owner))

    def release_lease(self, root_id: str, owner: str) -> None:
        """Drop ``owner``'s lease on ``root_id``; another owner's lease is left alone."""
        with self._write(f"release lease on {root_id!r}") as conn:
            conn.execute(self.SQL_RELEASE_LEASE, (root_id, owner))

    def _lease_of(self, conn: Connection, root_id: str) -> tuple[str, float] | None:
        row = conn.execute(self.SQL_LEASE, (root_id,)).fetchone()
        return None if row is None or not row[0] else (row[0], row[1])  # '': released

    def _check_fence(self, conn: Connection, fence: Fence) -> None:
        """Raise :class:`~orchestra.LeaseLost` unless ``fence`` is the current lease
        or claim, read in the transaction of the write it guards.

        An expired lease that nobody else took still counts as held: taking a
        lease is itself a transaction on its row, so once another process has
        taken it, this check fails.
        """
        if self.FENCE_CHECK is not None:
            conn.execute(self.FENCE_CHECK, (fence.scope, fence.key, fence.holder, fence.epoch))
            return
        sql = self.SQL_FENCES.get(fence.scope)
        row = None if sql is None else conn.execute(sql, (fence.key,)).fetchone()
        fences.check(fence, None if row is None else (row[0] or None, int(row[1])))


def _placeheld(sql: str, placeholder: str) -> str:
    """``sql`` with its ``?`` placeholders in the dialect's form."""
    return sql.replace("?", placeholder)
