"""A store in one SQLite file, shared safely by threads and processes.

The file is opened in WAL mode, so readers never block the writer and a reader
sees the last committed version of a row until a new one commits. Every write
is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write lock up
front (waiting up to :data:`BUSY_TIMEOUT_S` for another writer), so a
read-then-write (a lease check, a cancel request) cannot race another process.

Besides the :class:`~orchestra._stores.memory.Store` protocol, the store keeps cancel
requests (so ``orchestra cancel`` in one process can stop a tree running in
another) and leases (so only one process runs a tree at a time).

Transcripts are appended, not rewritten (see :mod:`orchestra._stores.transcripts`):
a run's row holds its state without ``messages``, and each message is a row
of ``messages``; a save writes the row and the messages added since the last
save, so its cost does not grow with the run. Reads of a state and its
messages happen in one read transaction (one snapshot).

Store schema versions: 1 — a run's whole state, transcript included, in its
row; 2 — transcripts in their own table; 3 — events found through their
tree's index; 4 — leases carry an epoch (fencing tokens, see
:mod:`orchestra._stores.fence`). An older file is migrated in place, in one
transaction, when first opened.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import orjson

from .._exceptions import ConfigError, RunNotFound, StateError, StoreError
from .._state import RunState
from . import fence as fences
from . import shared
from .fence import Fence
from .transcripts import SavedTranscripts, joined, message_json, store_rows

__all__ = ["BUSY_TIMEOUT_S", "STORE_SCHEMA_VERSION", "SQLiteStore", "default_store_path"]

STORE_SCHEMA_VERSION = 4
"""Version of the tables' layout (not of the run states inside them)."""

BUSY_TIMEOUT_S = 5.0
"""How long a statement waits for another connection's lock before failing."""

_MESSAGES_TABLE = """CREATE TABLE messages (
        run_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, idx)
    ) WITHOUT ROWID"""

_RUNS_BY_RECENCY = "CREATE INDEX runs_updated_at ON runs (updated_at) WHERE run_id = root_id"
"""Only roots are listed by recency: a child's save leaves this index alone."""

_TABLES = (
    """CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        root_id TEXT NOT NULL,
        parent_id TEXT,
        agent TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        state TEXT NOT NULL,
        messages INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX runs_root_id ON runs (root_id)",
    _RUNS_BY_RECENCY,
    _MESSAGES_TABLE,
    """CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        root_id TEXT NOT NULL,
        type TEXT NOT NULL,
        at REAL NOT NULL,
        data TEXT NOT NULL
    )""",
    # one index: a run's events are found within its tree's (see SQLiteStore.events)
    "CREATE INDEX events_root_id ON events (root_id)",
    """CREATE TABLE cancels (
        run_id TEXT PRIMARY KEY,
        root_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        requested_at REAL NOT NULL
    )""",
    "CREATE INDEX cancels_root_id ON cancels (root_id)",
    """CREATE TABLE leases (
        root_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL,
        epoch INTEGER NOT NULL DEFAULT 0
    )""",
)
"""A released lease keeps its row (no owner, expired), so a tree's epoch never goes back."""

_UPSERT_RUN = """
    -- a run's root, parent, agent and creation time never change: not rewritten
    INSERT INTO runs
        (run_id, root_id, parent_id, agent, status, created_at, updated_at, state, messages)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (run_id) DO UPDATE SET
        status = excluded.status, updated_at = excluded.updated_at,
        state = excluded.state, messages = excluded.messages
"""

_INSERT_MESSAGE = "INSERT INTO messages (run_id, idx, data) VALUES (?, ?, ?)"
_DROP_MESSAGES_FROM = "DELETE FROM messages WHERE run_id = ? AND idx >= ?"

_TAKE_LEASE = """
    INSERT INTO leases (root_id, owner, expires_at, epoch) VALUES (?, ?, ?, 1)
    ON CONFLICT (root_id) DO UPDATE SET
        owner = excluded.owner, expires_at = excluded.expires_at, epoch = leases.epoch + 1
    RETURNING epoch
"""
_RELEASE_LEASE = "UPDATE leases SET owner = '', expires_at = 0 WHERE root_id = ? AND owner = ?"

_UPSERT_CANCEL = """
    INSERT INTO cancels (run_id, root_id, reason, requested_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (run_id) DO UPDATE SET
        reason = excluded.reason, requested_at = excluded.requested_at
"""


def default_store_path() -> Path:
    """Where :class:`SQLiteStore` keeps runs when given no path.

    ``$ORCHESTRA_STORE`` if set, else ``$XDG_DATA_HOME/orchestra/runs.db`` with
    ``XDG_DATA_HOME`` defaulting to ``~/.local/share`` (a relative value is
    ignored, as the XDG spec asks).
    """
    explicit = os.environ.get("ORCHESTRA_STORE")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "orchestra" / "runs.db"


class SQLiteStore:
    """Run states, events, cancel requests and leases in one SQLite file.

    Durability: the file uses ``journal_mode=WAL`` with ``synchronous=NORMAL``.
    A committed write survives the process crashing or being killed. After an
    operating-system crash or power loss the last few commits may be lost (they
    roll back as a whole), but the file is never corrupted and never holds half
    a transaction. Every write is atomic: a run's previous state stays in place,
    and visible to readers, until its replacement commits.

    The connection may be used from any thread (e.g. ``trio.to_thread``); a lock
    serialises its use. SQLite errors (a corrupt file, a full disk) are raised
    as :class:`StoreError`.

    Args:
        path: the database file; its parent directories are created. Defaults
            to :func:`default_store_path`.

    Raises:
        StoreError: the file cannot be opened, is not a database or cannot use WAL.
        StateError: it was written by an unknown store schema version.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._path = Path(path) if path is not None else default_store_path()
        self._lock = threading.Lock()
        self._saved = SavedTranscripts()
        self._conn: sqlite3.Connection | None = _open(self._path)
        try:
            self._create_schema()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def shown(self) -> str:
        """The file, as messages show it."""
        return str(self._path)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection. Closing twice is fine; any other use then fails."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def inbox(self) -> Self:
        """This store keeps cancel requests (a :class:`~orchestra._stores.contract.CancelInbox`)."""
        return self

    @property
    def leases(self) -> Self:
        """This store keeps leases (see :class:`~orchestra._stores.contract.Leases`)."""
        return self

    # -- runs -------------------------------------------------------------

    def save(
        self, state: RunState, events: Sequence[dict[str, Any]] = (), *, fence: Fence | None = None
    ) -> None:
        """Insert or replace the state of ``state.run_id`` and append ``events``, atomically.

        With ``fence`` (a lease from :meth:`acquire_lease`), the save is
        *fenced*: it happens only if that lease, at that epoch, is still the
        current one, checked in the same transaction. A process that stalled
        past its lease and lost the tree to another one can therefore never
        save over the new holder's state.

        Only the messages added since this store last saved the run are
        written (the whole transcript if it does not extend that one).

        Raises:
            LeaseLost: ``fence`` was given and is not current.
            StateError: the state or an event cannot be stored as JSON.
        """
        self.save_many([state], events, fence=fence)

    def save_many(
        self,
        states: Sequence[RunState],
        events: Sequence[dict[str, Any]] = (),
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
        writes = [store_rows(self._saved, state) for state in states]
        doing = f"save run {states[0].run_id!r}" if len(states) == 1 else f"save {len(states)} runs"
        with self._write(doing) as conn:
            if fence is not None:
                _check_fence(conn, fence)
            conn.executemany(_UPSERT_RUN, [run_row for run_row, _, _ in writes])
            # a whole transcript replaces whatever is stored (dropped before any insert)
            wholes = [(run_row[0], 0) for run_row, start, _ in writes if start == 0]
            if wholes:
                conn.executemany(_DROP_MESSAGES_FROM, wholes)
            message_rows = [row for _, _, rows in writes for row in rows]
            if message_rows:
                conn.executemany(_INSERT_MESSAGE, message_rows)
            if event_rows:
                conn.executemany(_INSERT_EVENT, event_rows)
        for state in states:
            self._saved.written(state)

    def load(self, run_id: str) -> RunState:
        """The last saved state of ``run_id``.

        Raises:
            RunNotFound: no run with this id.
            SchemaVersionError: it was saved by an unknown run-state schema version.
        """
        states = self._states(f"load run {run_id!r}", "run_id = ?", run_id)
        if not states:
            raise RunNotFound(f"no run {run_id!r} in {self._path}")
        return states[0]

    def tree(self, root_id: str) -> list[RunState]:
        """Every run of the tree rooted at ``root_id``: the root, then by creation time.

        Raises:
            RunNotFound: no run belongs to this tree.
        """
        states = self._states(
            f"load tree {root_id!r}",
            "root_id = ? ORDER BY run_id != root_id, created_at, run_id",
            root_id,
        )
        if not states:
            raise RunNotFound(f"no run tree {root_id!r} in {self._path}")
        return states

    def list_runs(self, *, limit: int = 50, roots_only: bool = True) -> list[RunState]:
        """Up to ``limit`` runs, most recently updated first (only roots by default)."""
        if limit < 0:
            raise ConfigError(f"limit must be >= 0, got {limit}")
        where = "run_id = root_id" if roots_only else "1"
        return self._states("list runs", f"{where} ORDER BY updated_at DESC, run_id LIMIT ?", limit)

    def _states(self, doing: str, where: str, *params: object) -> list[RunState]:
        """The states of the runs ``where`` selects, in its order, from one snapshot."""
        with self._lock, self._sqlite_errors(doing):
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                heads = conn.execute(
                    f"SELECT run_id, state, messages FROM runs WHERE {where}", params
                ).fetchall()
                transcripts = _transcripts(conn, heads)
            finally:
                conn.execute("COMMIT")
        return [joined(head, transcripts.get(run_id, [])) for run_id, head, _ in heads]

    def resolve(self, prefix: str) -> str:
        """The run id that ``prefix`` starts (an exact id always wins).

        Raises:
            ConfigError: the prefix is empty.
            RunNotFound: no run id starts with it.
            StateError: several do (the message lists some).
        """
        if not prefix:
            raise ConfigError("a run id prefix must not be empty")
        ids = [
            run_id
            for (run_id,) in self._read(
                f"resolve run id prefix {prefix!r}",
                "SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT 6",
                len(prefix),
                prefix,
            )
        ]
        return shared.pick_run_id(prefix, ids, self._path)

    # -- events -----------------------------------------------------------

    def add_events(self, events: Iterable[dict[str, Any]], *, fence: Fence | None = None) -> None:
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
                _check_fence(conn, fence)
            conn.executemany(_INSERT_EVENT, rows)

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[dict[str, Any]]:
        """Stored events in the order they were added, optionally of one run or tree."""
        if run_id is not None and root_id is None:  # its tree's index serves it
            found = self._read("find a run's tree", _ROOT_OF, run_id)
            root_id = found[0][0] if found else None
        where, params = _events_where(run_id, root_id)
        rows = self._read("read events", f"SELECT data FROM events {where} ORDER BY seq", *params)
        return [orjson.loads(data) for (data,) in rows]

    # -- cancel requests --------------------------------------------------

    def request_cancel(self, run_id: str, reason: str) -> None:
        """Ask whichever process runs ``run_id``'s tree to cancel that run.

        A newer request for the same run replaces the older one's reason.

        Raises:
            RunNotFound: no run with this id.
        """
        with self._write(f"request cancel of run {run_id!r}") as conn:
            found = conn.execute("SELECT root_id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if found is None:
                raise RunNotFound(f"no run {run_id!r} in {self._path}")
            conn.execute(_UPSERT_CANCEL, (run_id, found[0], reason, time.time()))

    def pending_cancels(self, root_id: str | None = None) -> dict[str, str]:
        """Cancel requests for runs of the tree ``root_id`` (of every tree if None):
        reason by run id, oldest first."""
        rows = self._read(
            f"read cancel requests of {root_id or 'every tree'!r}",
            "SELECT run_id, reason FROM cancels WHERE ?1 IS NULL OR root_id = ?1"
            " ORDER BY requested_at, run_id",
            root_id,
        )
        return dict(rows)

    def clear_cancel(self, run_id: str) -> None:
        """Forget the cancel request for ``run_id`` (if any): it has been applied."""
        with self._write(f"clear cancel of run {run_id!r}") as conn:
            conn.execute("DELETE FROM cancels WHERE run_id = ?", (run_id,))

    def clear_cancels(self, root_id: str) -> None:
        """Forget every cancel request of the tree ``root_id``.

        Done when a process takes the tree and when it lets it go, so a request
        that no process applied (its holder died, or the tree finished first)
        never stops a later resume.
        """
        with self._write(f"clear cancel requests of {root_id!r}") as conn:
            conn.execute("DELETE FROM cancels WHERE root_id = ?", (root_id,))

    # -- leases -----------------------------------------------------------

    def acquire_lease(
        self, root_id: str, owner: str, ttl: float = 30.0, now: float | None = None
    ) -> Fence:
        """Own the tree ``root_id`` for ``ttl`` seconds; the fence of this taking.

        Succeeds when nobody holds the lease, when ``owner`` already does (the
        lease is extended), or when the holder's lease has expired. Every
        taking gets the next epoch, so a fence from an earlier one (even the
        same owner's) no longer passes. The check and the claim are one
        ``BEGIN IMMEDIATE`` transaction, so of several processes racing for a
        lease exactly one wins.

        Raises:
            LeaseError: another owner holds an unexpired lease.
        """
        now = shared.now_or(now)
        expires_at = now + shared.checked_ttl(ttl)
        with self._write(f"acquire lease on {root_id!r}") as conn:
            held = _lease_of(conn, root_id)
            if held is not None and held[0] != owner and held[1] > now and shared.alive(held[0]):
                raise shared.held_by(root_id, held, now)
            (epoch,) = conn.execute(_TAKE_LEASE, (root_id, owner, expires_at)).fetchone()
        return Fence(scope="lease", key=root_id, holder=owner, epoch=epoch)

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
            held = _lease_of(conn, root_id)
            if held is None or held[0] != owner:
                raise shared.not_held(root_id, owner, held, now)
            conn.execute(
                "UPDATE leases SET expires_at = ? WHERE root_id = ?", (expires_at, root_id)
            )

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
            conn.execute("DELETE FROM cancels WHERE root_id = ?", (root_id,))
            conn.execute(_RELEASE_LEASE, (root_id, owner))

    def release_lease(self, root_id: str, owner: str) -> None:
        """Drop ``owner``'s lease on ``root_id``; another owner's lease is left alone."""
        with self._write(f"release lease on {root_id!r}") as conn:
            conn.execute(_RELEASE_LEASE, (root_id, owner))

    # -- plumbing ---------------------------------------------------------

    def _create_schema(self) -> None:
        with self._write("create the schema") as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
            found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if found is None:
                _create_tables(conn)
            elif found[0] in (1, 2, 3):
                if found[0] == 1:
                    _migrate_from_1(conn)
                if found[0] <= 2:
                    _migrate_from_2(conn)
                _migrate_from_3(conn)
            elif found[0] != STORE_SCHEMA_VERSION:
                raise StateError(
                    f"{self._path} has store schema version {found[0]!r}; this Orchestra "
                    f"reads version {STORE_SCHEMA_VERSION} only (upgrade Orchestra)"
                )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateError(f"the store at {self._path} is closed")
        return self._conn

    @contextlib.contextmanager
    def _sqlite_errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self._path}: cannot {doing}: {exc}") from exc

    @contextlib.contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the file's write lock from its start."""
        with self._lock, self._sqlite_errors(doing):
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _read(self, doing: str, sql: str, *params: object) -> list[Any]:
        """The rows of one query (one statement: a consistent snapshot)."""
        with self._lock, self._sqlite_errors(doing):
            return self._connection().execute(sql, params).fetchall()


def _open(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode, creating the file and its directories."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the store at {path}: {exc}") from exc
    try:
        _configure(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _configure(conn: sqlite3.Connection, path: Path) -> None:
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store at {path}: {exc}") from exc
    if mode != "wal":
        raise StoreError(
            f"the store at {path} cannot use WAL journaling (got {mode!r}); "
            "put it on a local filesystem"
        )


def _create_tables(conn: sqlite3.Connection) -> None:
    for statement in _TABLES:
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (STORE_SCHEMA_VERSION,))


def _migrate_from_3(conn: sqlite3.Connection) -> None:
    """Store schema 3 -> 4: leases carry an epoch (fencing tokens)."""
    conn.execute("ALTER TABLE leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (STORE_SCHEMA_VERSION,))


def _migrate_from_2(conn: sqlite3.Connection) -> None:
    """Store schema 2 -> 3: events by run are found through their tree's index,
    and only roots are indexed by recency (fewer index writes per save)."""
    conn.execute("DROP INDEX IF EXISTS events_run_id")
    conn.execute("DROP INDEX IF EXISTS runs_updated_at")
    conn.execute(_RUNS_BY_RECENCY)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (STORE_SCHEMA_VERSION,))


_ROOT_OF = "SELECT root_id FROM runs WHERE run_id = ?"


def _events_where(run_id: str | None, root_id: str | None) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (and its parameters) of the events of a run, of a tree or of
    both. The tree index serves the last two; a run's alone are scanned for (a run
    with no saved state, whose tree is not known, only has events added by hand)."""
    if root_id is None:
        return ("", ()) if run_id is None else ("WHERE run_id = ?", (run_id,))
    if run_id is None:
        return "WHERE root_id = ?", (root_id,)
    return "WHERE root_id = ? AND run_id = ?", (root_id, run_id)


def _migrate_from_1(conn: sqlite3.Connection) -> None:
    """Store schema 1 -> 2: move every run's transcript out of its row."""
    conn.execute("ALTER TABLE runs ADD COLUMN messages INTEGER NOT NULL DEFAULT 0")
    conn.execute(_MESSAGES_TABLE)
    for run_id, text in conn.execute("SELECT run_id, state FROM runs").fetchall():
        data = orjson.loads(text)
        messages = data.pop("messages", None) or []
        conn.execute(
            "UPDATE runs SET state = ?, messages = ? WHERE run_id = ?",
            (orjson.dumps(data).decode(), len(messages), run_id),
        )
        conn.executemany(
            _INSERT_MESSAGE,
            [(run_id, i, message_json(m)) for i, m in enumerate(messages)],
        )


def _transcripts(
    conn: sqlite3.Connection, heads: Sequence[tuple[str, str, int]]
) -> dict[str, list[dict[str, Any]]]:
    """The saved messages of each run in ``heads`` (up to its recorded count)."""
    counts = {run_id: count for run_id, _, count in heads if count}
    found: dict[str, list[dict[str, Any]]] = {run_id: [] for run_id in counts}
    ids = list(counts)
    for at in range(0, len(ids), 500):  # stay under SQLite's limit on parameters
        batch = ids[at : at + 500]
        marks = ",".join("?" * len(batch))
        rows = conn.execute(
            f"SELECT run_id, idx, data FROM messages WHERE run_id IN ({marks})"
            " ORDER BY run_id, idx",
            batch,
        )
        for run_id, idx, data in rows:
            if idx < counts[run_id]:
                found[run_id].append(shared.message(run_id, idx, data))
    return found


def _lease_of(conn: sqlite3.Connection, root_id: str) -> tuple[str, float] | None:
    row = conn.execute(
        "SELECT owner, expires_at FROM leases WHERE root_id = ?", (root_id,)
    ).fetchone()
    return None if row is None or not row[0] else (row[0], row[1])  # '': released


def _check_fence(conn: sqlite3.Connection, fence: Fence) -> None:
    """Raise :class:`LeaseLost` unless ``fence`` is the current lease on its tree.

    An expired lease that nobody else took still counts as held: taking a
    lease is itself a transaction on this row, so once another process has
    taken it, this check fails. SQLite keeps no worker claims: a claim never
    passes here.
    """
    row = None
    if fence.scope == "lease":
        row = conn.execute(
            "SELECT owner, epoch FROM leases WHERE root_id = ?", (fence.key,)
        ).fetchone()
    fences.check(fence, None if row is None else (row[0] or None, row[1]))


_INSERT_EVENT = "INSERT INTO events (run_id, root_id, type, at, data) VALUES (?, ?, ?, ?, ?)"
