"""A store in one SQLite file, shared safely by threads and processes.

The file is opened in WAL mode, so readers never block the writer and a reader
sees the last committed version of a row until a new one commits. Every write
is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write lock up
front (waiting up to :data:`BUSY_TIMEOUT_S` for another writer), so a
read-then-write (a lease check, a cancel request) cannot race another process.

The store's body is :class:`~orchestra._stores.sql.SQLStore`, shared with the
PostgreSQL store: this module brings SQLite's connection, transactions, schema
and migrations. Besides run states and events, the store keeps cancel
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
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from .._exceptions import StateError, StoreError
from .._state import RunState
from . import shared
from .sql import SQLStore
from .transcripts import joined, message_json

__all__ = ["BUSY_TIMEOUT_S", "STORE_SCHEMA_VERSION", "SQLiteStore", "default_store_path"]

STORE_SCHEMA_VERSION = 5
"""Version of the tables' layout (not of the run states inside them)."""

BUSY_TIMEOUT_S = 5.0
"""How long a statement waits for another connection's lock before failing."""

_MESSAGES_TABLE = """CREATE TABLE messages (
        run_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, idx)
    ) WITHOUT ROWID"""

_LIVE_TEXT_TABLE = """CREATE TABLE IF NOT EXISTS live_text (
    run_id TEXT PRIMARY KEY,
    root_id TEXT NOT NULL,
    text TEXT NOT NULL,
    at REAL NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    prompt INTEGER NOT NULL DEFAULT 0,
    cap INTEGER NOT NULL DEFAULT 0
)"""
"""What each run is streaming now (see :class:`~.contract.StreamNotes`); a few rows at most."""

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
    _LIVE_TEXT_TABLE,
    """CREATE TABLE leases (
        root_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL,
        epoch INTEGER NOT NULL DEFAULT 0
    )""",
)
"""A released lease keeps its row (no owner, expired), so a tree's epoch never goes back."""


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


class SQLiteStore(SQLStore):
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
        super().__init__()
        self._path = Path(path) if path is not None else default_store_path()
        self._lock = threading.Lock()
        self._committed: list[Callable[[], None]] = []
        self._conn: sqlite3.Connection | None = _open(self._path)
        self._create_schema_or_close()

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

    def close(self) -> None:
        """Close the connection. Closing twice is fine; any other use then fails."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _create_schema(self) -> None:
        when_free(self._path, self._create_or_migrate)

    def _create_or_migrate(self) -> None:
        with self._write("create the schema") as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
            found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if found is None:
                _create_tables(conn)
            elif found[0] in (1, 2, 3, 4):
                if found[0] == 1:
                    _migrate_from_1(conn)
                if found[0] <= 2:
                    _migrate_from_2(conn)
                if found[0] <= 3:
                    _migrate_from_3(conn)
                _migrate_from_4(conn)
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
        """One write transaction, holding the file's write lock from its start;
        the callbacks given to :meth:`_on_commit` in it run once it committed."""
        with self._lock, self._sqlite_errors(doing):
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            self._committed = []
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            for callback in self._committed:
                callback()

    def _on_commit(self, callback: Callable[[], None]) -> None:
        self._committed.append(callback)

    def _prefix(self, prefix: str) -> tuple[str, tuple[object, ...]]:
        """``substr`` (a plain comparison, whatever characters the prefix holds)."""
        return "substr(run_id, 1, ?) = ?", (len(prefix), prefix)

    def _read(self, doing: str, sql: str, *params: object) -> list[Any]:
        """The rows of one query (one statement: a consistent snapshot)."""
        with self._lock, self._sqlite_errors(doing):
            return self._connection().execute(sql, params).fetchall()

    def _states(self, doing: str, where: str, *params: object) -> list[RunState]:
        """The states of the runs ``where`` selects, in its order, from one snapshot."""
        with self._lock, self._sqlite_errors(doing):
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                return self._states_in(conn, where, *params)
            finally:
                conn.execute("COMMIT")

    def _states_in(self, conn: Any, where: str, *params: object) -> list[RunState]:
        """:meth:`_states`, read in ``conn``'s open transaction."""
        heads = conn.execute(
            f"SELECT r.run_id, r.state, r.messages FROM runs r WHERE {where}", params
        ).fetchall()
        transcripts = _transcripts(conn, heads)
        return [joined(head, transcripts.get(run_id, [])) for run_id, head, _ in heads]


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
        when_free(path, partial(_configure, conn, path))
    except BaseException:
        conn.close()
        raise
    return conn


def when_free(path: Path, action: Callable[[], None]) -> None:
    """``action()`` (opening ``path``), tried again after a short pause while SQLite
    says "database is locked" at once, up to :data:`BUSY_TIMEOUT_S`.

    SQLite waits out another connection's lock (``busy_timeout``) except where
    waiting could deadlock: two connections opening one new file at once (each
    switching it to WAL, or creating the tables) may then be refused at once.
    Opening is idempotent (``journal_mode`` and ``CREATE ... IF`` checks), so
    the refused one simply tries again: no thread ever fails to open a store
    another is creating. A blocking wait: this runs when a store is made.

    Raises:
        StoreError: whatever ``action`` raises that is not such a refusal, or
            the refusal once the time is up.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.002
    while True:
        try:
            action()
            return
        except StoreError as exc:
            if not _locked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _locked(exc: StoreError) -> bool:
    """Whether ``exc`` is SQLite's refusal to wait for a lock."""
    cause = exc.__cause__
    said = str(cause).lower()
    return isinstance(cause, sqlite3.OperationalError) and ("locked" in said or "busy" in said)


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


def _migrate_from_4(conn: sqlite3.Connection) -> None:
    """Store schema 4 -> 5: the text each run is streaming now."""
    conn.execute(_LIVE_TEXT_TABLE)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (STORE_SCHEMA_VERSION,))


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
            SQLStore.SQL_INSERT_MESSAGE,
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
