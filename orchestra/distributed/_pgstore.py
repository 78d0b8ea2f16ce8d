"""A store in PostgreSQL, shared by the worker processes of several machines.

:class:`PostgresStore` has the public surface and the semantics of
:class:`~orchestra._stores.sqlite.SQLiteStore` (so the CLI and the Runner can use
either): run states with append-only transcripts (see
:mod:`orchestra._stores.transcripts`), events, cancel requests and leases with fenced
saves. On top of that it records, per run, which worker executes it now
(``executor``) and how many times it was (re)queued (``attempt``), for the
distributed worker.

Connections: one per thread (the trio thread saves synchronously, as with
SQLite; worker threads of ``trio.to_thread`` read), opened on first use and
closed with the store. Every operation is one transaction on its thread's
connection, committed at its end (psycopg 3, synchronous API, autocommit
off). A connection that breaks is replaced by the next operation.

Concurrency: PostgreSQL's default isolation (read committed) plus explicit
locks where a read decides a write. A lease is taken under a transaction-level
advisory lock on its tree, so of several processes racing for it exactly one
wins; a fenced save reads the lease row ``FOR SHARE``, so it cannot commit
across a takeover. A read of states and their transcripts is one statement
(one snapshot).

Fencing (see :mod:`orchestra._stores.fence`): a lease row and a run row
each carry an epoch, increased by every taking (:meth:`PostgresStore.acquire_lease`,
:meth:`PostgresStore.claim`, and a stop in the database); a fenced write reads
the row ``FOR SHARE`` and compares holder and epoch in its own transaction.

Store schema versions: see :mod:`._pgschema`.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from .._exceptions import (
    RunNotFound,
    StateError,
    StoreError,
    StoreUnreachable,
)
from .._state import Interruption, InterruptionKind, RunState, Status, Usage
from .._stores import shared
from .._stores.fence import Fence
from .._stores.sql import Connection as SQLConnection
from .._stores.sql import SQLStore
from .._stores.transcripts import head_json, joined
from ._pgbatch import Batch
from ._pgschema import FENCE_SQLSTATE, PG_SCHEMA_VERSION, create_or_migrate, refusal
from ._pgurl import redacted, where

_R = TypeVar("_R")

__all__ = ["PG_SCHEMA_VERSION", "PostgresStore", "redacted"]


CONNECT_TIMEOUT_S = 10
"""How long opening a connection may take, unless the URL says otherwise."""

IDLE_IN_TRANSACTION_MS = 2000
"""The server ends a session of ours that stayed this long inside a transaction
without a statement (its process froze mid-transaction), releasing its locks."""

STALLED_S = 0.25
"""A cancel does not wait for a lock held by a transaction idle this long
(see :meth:`PostgresStore.lock_rows`)."""

_END_STALLED = """
    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND application_name = current_setting('application_name')
        AND (state LIKE 'idle in transaction%%' OR (state = 'active' AND wait_event = 'ClientRead'))
        AND state_change < clock_timestamp() - make_interval(secs => %s)
"""
"""End our sessions stalled inside a transaction for longer than the given seconds:
idle in it (a process frozen between a batched transaction's read and its
writes), or ``active`` and waiting for its client (frozen in the middle of
sending a statement, which no server timeout ends)."""

Connection = psycopg.Connection[TupleRow]

_SELECT_STATES = """
    SELECT r.run_id, r.state, ARRAY(
        SELECT m.data FROM messages m
        WHERE m.run_id = r.run_id AND m.idx < r.messages ORDER BY m.idx
    )
    FROM runs r WHERE """


def _in_a_running_step(also: str = "") -> str:
    """The run ``r`` executes inside the step of a run ``s`` still going on (see
    :meth:`PostgresStore.mark_inline`), ``s`` meeting ``also`` too."""
    return (
        "EXISTS (SELECT 1 FROM runs s WHERE s.run_id = r.step_of"
        f" AND s.status = '{Status.RUNNING.value}'{also})"
    )


class Stale(NamedTuple):
    """A run that stopped moving (see :meth:`PostgresStore.stale_running`): its
    attempt and its claim's epoch when it was found."""

    run_id: str
    attempt: int
    epoch: int


_IN_A_RUNNING_STEP = _in_a_running_step()
_UNCLAIMED = f" AND executor IS NULL AND NOT {_in_a_running_step(' AND s.executor IS NOT NULL')}"
"""Runs of a tree that no worker executes: queued or parked, and those executed
inside the step of a run that no worker executes now."""
_UPDATE_HEAD = "UPDATE runs SET status = %s, updated_at = %s, state = %s WHERE run_id = %s"
_STOP_HEAD = """
    UPDATE runs SET status = %s, updated_at = %s, state = %s, epoch = epoch + 1, parked = false
    WHERE run_id = %s
"""
"""A run stopped in the database: whoever executed it is fenced out."""

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
"""Wait for (then hold until the transaction ends) the advisory lock named by a string."""


class PostgresStore(SQLStore):
    """Run states, events, cancel requests, leases and executors in a PostgreSQL database.

    Durability is the server's: a save has committed when it returns. Every
    write is atomic: a run's previous state stays in place, and visible to
    readers, until its replacement commits. psycopg errors (an unreachable
    server, a failed statement) are raised as :class:`StoreError`, with the
    password never in a message.

    Args:
        url: a ``postgresql://user[:password]@host[:port]/database`` URL. The
            tables are created in it if absent.

    Raises:
        ConfigError: ``url`` is not a PostgreSQL URL.
        StoreError: the server cannot be reached or the tables cannot be created.
        StateError: the tables were made by an unknown store schema version.
    """

    PLACEHOLDER = "%s"
    SQL_INSERT_MESSAGE = """
        INSERT INTO messages (run_id, idx, data) VALUES (%s, %s, %s)
        ON CONFLICT (run_id, idx) DO UPDATE SET data = excluded.data
    """
    """An upsert, not a plain insert: a row past the run's recorded count (left by
    another writer's longer transcript) is overwritten instead of failing the save."""
    SQL_LEASE = "SELECT owner, expires_at FROM leases WHERE root_id = %s FOR UPDATE"
    """Locked: a taking waits for a renewal in progress (and the other way round)."""
    FENCE_CHECK = "SELECT orchestra_fence(%s, %s, %s, %s)"
    """The server checks a fence (see :mod:`._pgschema`): in a batched transaction
    the check goes with the writes (a save is one round trip); a refusal aborts
    the transaction and comes out of it as :class:`LeaseLost`."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._dsn = url
        self._url = redacted(url)
        self._where = where(url, self._url)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._conns: dict[threading.Thread, Connection] = {}
        self._closed = False
        self._create_schema_or_close()

    @property
    def url(self) -> str:
        """The database's URL, password redacted (for messages)."""
        return self._url

    @property
    def path(self) -> str:
        """What ``--store`` takes to open this store again: the URL, password
        included (pass it to a child process; never print it: see :attr:`url`)."""
        return self._dsn

    @property
    def shown(self) -> str:
        """The URL, password redacted (as :attr:`url`)."""
        return self._url

    def __repr__(self) -> str:
        return f"PostgresStore({self._url!r})"

    def close(self) -> None:
        """Close every thread's connection. Closing twice is fine; any other use then fails."""
        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()

    # -- runs -------------------------------------------------------------

    def _states(self, doing: str, where: str, *params: object) -> list[RunState]:
        """The states of the runs ``where`` selects, in its order (one statement: one snapshot)."""

        def read() -> list[RunState]:
            with self._transaction(doing) as conn:
                return self._states_in(conn, where, *params)

        return self._reading(read)

    def _states_in(self, conn: Any, where: str, *params: object) -> list[RunState]:
        """:meth:`_states`, read in ``conn``'s open transaction."""
        return _select_states(conn, where.replace("?", "%s"), params)

    def _lock_run(self, conn: Any, run_id: str) -> None:
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))

    def _reading(self, read: Callable[[], _R]) -> _R:
        """``read()``, once more on a fresh connection if the server dropped this
        thread's (after a restart, say): a read changes nothing, so it is safe."""
        try:
            return read()
        except StoreUnreachable:
            if getattr(self._local, "depth", 0):
                raise  # inside a caller's transaction: that one failed
            return read()

    # -- events -----------------------------------------------------------

    def check_fence(self, fence: Fence) -> None:
        """Raise :class:`LeaseLost` unless ``fence`` is current. Inside a
        :meth:`transaction` it is part of it: the write after it in the same
        transaction is fenced (the row stays share-locked until the commit)."""
        if getattr(self._local, "depth", 0):
            # Inside a caller's transaction: one statement in it (kept in its batch,
            # if it is batched), no savepoint (two round trips fewer). A refusal
            # raises LeaseLost, which rolls the caller's whole transaction back:
            # nothing is left to undo in part.
            self._check_fence(getattr(self._local, "batch", None) or self._local.conn, fence)
            return
        with self._transaction(f"check the {fence.describe()}") as conn:
            self._check_fence(conn, fence)

    # -- cancel requests --------------------------------------------------

    def cancels_of(self, root_ids: Sequence[str]) -> dict[str, str]:
        """Cancel requests for runs of the trees ``root_ids`` (one query), oldest first."""
        return self._cancels(f"{len(root_ids)} tree(s)", "root_id = ANY(%s)", list(root_ids))

    # -- leases -----------------------------------------------------------

    def _lock_lease(self, conn: SQLConnection, root_id: str) -> None:
        conn.execute(_LOCK, (f"orchestra lease {root_id}",))

    def _prefix(self, prefix: str) -> tuple[str, tuple[object, ...]]:
        """``LIKE`` (the primary key's "C" collation lets it use the index)."""
        return "run_id LIKE ?", (re.sub(r"([\\%_])", r"\\\1", prefix) + "%",)

    # -- executors (the distributed worker) -------------------------------

    def claim(
        self, run_id: str, executor: str, attempt: int | None = None
    ) -> tuple[RunState, Fence] | None:
        """Make ``executor`` the worker executing ``run_id``, if the run is ``running``
        (and at ``attempt``, if given: a workflow queued for an earlier attempt,
        which a sweep or a wake replaced, never claims the run).

        Each claim takes the run's next epoch: whoever claimed it before (a
        worker declared dead that wakes up, say) is fenced out of every save,
        ledger decision and write from then on. The update and the read of the
        state are one transaction. A run that :meth:`stop_unclaimed` stopped
        first is not claimed (and it does not stop a run claimed first): of
        the two, exactly one wins.

        Returns:
            The run's state and the claim's fence; None when the run is not
            running, is parked (it is taken up again when its children have
            ended), is at another attempt, or does not exist: look at it with
            :meth:`load`.
        """
        with self._transaction(f"claim run {run_id!r} for {executor!r}") as conn:
            claimed = conn.execute(
                "UPDATE runs SET executor = %s, epoch = epoch + 1 WHERE run_id = %s"
                " AND status = %s AND NOT parked AND attempt = COALESCE(%s, attempt)"
                " RETURNING epoch",
                (executor, run_id, Status.RUNNING.value, attempt),
            ).fetchone()
            if claimed is None:
                return None
            state = _select_states(conn, "r.run_id = %s", (run_id,))[0]
        return state, Fence(scope="claim", key=run_id, holder=executor, epoch=int(claimed[0]))

    def stop_unclaimed(self, root_id: str, reason: str) -> list[str]:
        """Stop every run of the tree ``root_id`` that is running with no executor.

        Such a run waits in a queue: nothing would see a cancel request for it.
        Each becomes ``interrupted`` (a cancel, with ``reason``), as if its
        executor had applied the request, in one transaction that locks the
        rows (a concurrent :meth:`claim` waits, then finds the run stopped).

        Returns:
            The ids of the runs stopped, in id order.
        """
        return self._stop_running(root_id, reason, _UNCLAIMED)

    def stop_running(self, root_id: str, reason: str) -> list[str]:
        """Stop in the database every run of the tree ``root_id`` still running,
        wherever it executes (for a cancel that its workers did not apply in
        time: a worker dead, stalled, or cut off from the database).

        As :meth:`stop_unclaimed`, and each stopped run takes its next epoch:
        the worker executing it, if any, is fenced out (it saves nothing more).

        Returns:
            The ids of the runs stopped, in id order.
        """
        return self._stop_running(root_id, reason, "")

    def _stop_running(self, root_id: str, reason: str, which: str) -> list[str]:
        with self._transaction(f"stop running runs of {root_id!r}") as conn:
            ids = [
                run_id
                for (run_id,) in self.lock_rows(
                    conn,
                    "SELECT run_id FROM runs r WHERE root_id = %s AND status = %s"
                    f"{which} ORDER BY run_id FOR UPDATE",
                    (root_id, Status.RUNNING.value),
                )
            ]
            if not ids:
                return []
            states = _select_states(conn, "r.run_id = ANY(%s) ORDER BY r.run_id", (ids,))
            now = time.time()
            for state in states:
                _stop(state, reason, now)
                conn.execute(
                    _STOP_HEAD, (state.status.value, state.updated_at, _head(state), state.run_id)
                )
            self._on_commit(lambda: self._written(states))
        return ids

    def amend_usage(self, usages: Mapping[str, tuple[Usage, Usage | None]]) -> list[str]:
        """Set the saved ``tree`` usage (and ``own``, unless None) of the runs named,
        those not running (a running run's executor saves its own numbers);
        the ids of the runs whose saved state changed, in id order.

        For the budget ledger, which records what was charged.
        """
        with self._transaction(f"amend the usage of {len(usages)} run(s)") as conn:
            stopped = self.lock_rows(
                conn,
                "SELECT run_id FROM runs WHERE run_id = ANY(%s) AND status <> %s"
                " ORDER BY run_id FOR UPDATE",
                (list(usages), Status.RUNNING.value),
            )
            ids = [run_id for (run_id,) in stopped]
            states = _select_states(conn, "r.run_id = ANY(%s) ORDER BY r.run_id", (ids,))
            changed = [s for s in states if _amended(s, *usages[s.run_id])]
            for state in changed:
                conn.execute(
                    _UPDATE_HEAD, (state.status.value, state.updated_at, _head(state), state.run_id)
                )
            self._on_commit(lambda: self._written(changed))
        return [s.run_id for s in changed]

    def requeue(self, run_id: str) -> int:
        """Count one more (re)queueing of ``run_id`` and clear its executor; the new count.

        Raises:
            RunNotFound: no run with this id.
        """
        with self._transaction(f"requeue run {run_id!r}") as conn:
            row = conn.execute(
                "UPDATE runs SET attempt = attempt + 1, executor = NULL, parked = false,"
                " step_of = NULL WHERE run_id = %s RETURNING attempt",
                (run_id,),
            ).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self._url}")
        return int(row[0])

    def requeue_if(self, stale: Stale) -> int | None:
        """:meth:`requeue` the run if it is running, still at the attempt and
        the epoch ``stale`` saw, and not parked: of several workers doing it at
        once, one does; and a run claimed since ``stale`` was read (its workflow
        began meanwhile: the claim took the next epoch) is left to its
        claimant. The new count, or None."""
        with self._transaction(f"requeue run {stale.run_id!r}") as conn:
            row = conn.execute(
                "UPDATE runs SET attempt = attempt + 1, executor = NULL, step_of = NULL"
                " WHERE run_id = %s AND attempt = %s AND epoch = %s AND status = %s"
                " AND NOT parked RETURNING attempt",
                (stale.run_id, stale.attempt, stale.epoch, Status.RUNNING.value),
            ).fetchone()
        return None if row is None else int(row[0])

    def stale_running(self, before: float) -> list[Stale]:
        """Runs saved ``running`` and not saved since ``before``, not parked, and
        not executed inside the step of a running run (whoever steps that run
        goes on with them), in id order."""
        rows = self._read(
            "find runs that stopped moving",
            f"SELECT run_id, attempt, epoch FROM runs r WHERE status = '{Status.RUNNING.value}'"
            f" AND updated_at < %s AND NOT parked AND NOT {_IN_A_RUNNING_STEP} ORDER BY run_id",
            before,
        )
        return [Stale(str(run_id), int(attempt), int(epoch)) for run_id, attempt, epoch in rows]

    # -- parking: a run waiting for its children holds no worker ----------

    def park(self, run_id: str, fence: Fence) -> bool:
        """Park ``run_id`` if one of its children is still running; whether it did.

        For the step that holds the run's claim (``fence``), once it has saved
        the run with calls waiting for children. A parked run has no executor
        and no workflow; :meth:`wake` queues it again. The run's row is locked,
        so of a park and the wake of a child that ends meanwhile, the later
        sees the other: either the child's end is seen here (not parked: the
        caller steps again at once) or the park is seen by the wake.

        Raises:
            LeaseLost: the claim was taken over (nothing was written).
        """
        with self._transaction(f"park run {run_id!r}") as conn:
            self._lock_run(conn, run_id)
            self._check_fence(conn, fence)
            if not _children_running(conn, run_id):
                return False
            conn.execute(
                "UPDATE runs SET parked = true, executor = NULL WHERE run_id = %s", (run_id,)
            )
        return True

    def running_children(self, run_id: str) -> list[str]:
        """The ids of ``run_id``'s children that are running, in id order."""
        rows = self._read(
            f"find the running children of {run_id!r}",
            "SELECT run_id FROM runs WHERE parent_id = ? AND status = ? ORDER BY run_id",
            run_id,
            Status.RUNNING.value,
        )
        return [row[0] for row in rows]

    def wake(self, run_id: str) -> int | None:
        """Unpark ``run_id`` if it is parked, running and none of its children
        runs any longer; its new attempt (queue it under that), or None."""
        with self._transaction(f"wake run {run_id!r}") as conn:
            row = conn.execute(
                "SELECT 1 FROM runs WHERE run_id = %s AND parked AND status = %s FOR UPDATE",
                (run_id, Status.RUNNING.value),
            ).fetchone()
            if row is None or _children_running(conn, run_id):
                return None
            (attempt,) = _one(
                conn.execute(
                    "UPDATE runs SET parked = false, attempt = attempt + 1, executor = NULL"
                    " WHERE run_id = %s RETURNING attempt",
                    (run_id,),
                )
            )
        return int(attempt)

    def parked_ready(self) -> list[str]:
        """Parked runs none of whose children runs any longer (a wake that was
        lost with the worker that owed it), in id order."""
        rows = self._read(
            "find parked runs whose children ended",
            "SELECT r.run_id FROM runs r WHERE r.parked AND r.status = %s AND NOT EXISTS"
            " (SELECT 1 FROM runs c WHERE c.parent_id = r.run_id AND c.status = %s)"
            " ORDER BY r.run_id",
            Status.RUNNING.value,
            Status.RUNNING.value,
        )
        return [str(run_id) for (run_id,) in rows]

    def mark_inline(self, run_id: str, fence: Fence) -> None:
        """Record that ``run_id`` executes inside the step holding ``fence`` (a
        claim on one of its ancestors): no workflow of its own; it goes on
        wherever that run is taken up (see :class:`~._host.Inline`).

        Raises:
            LeaseLost: the claim was taken over (nothing was written).
        """
        with self._transaction(f"mark run {run_id!r} inline") as conn:
            self._check_fence(conn, fence)
            conn.execute("UPDATE runs SET step_of = %s WHERE run_id = %s", (fence.key, run_id))

    def step_of(self, run_id: str) -> str | None:
        """The run inside whose step ``run_id`` executes (None: it steps on its own).

        Raises:
            RunNotFound: no run with this id.
        """
        found = self._column("step_of", run_id)
        return None if found is None else str(found)

    def parked(self, run_id: str) -> bool:
        """Whether ``run_id`` is parked (waiting for its children).

        Raises:
            RunNotFound: no run with this id.
        """
        return bool(self._column("parked", run_id))

    def attempt(self, run_id: str) -> int:
        """How many times ``run_id`` was (re)queued (0: never).

        Raises:
            RunNotFound: no run with this id.
        """
        return int(self._column("attempt", run_id))

    def status(self, run_id: str) -> Status:
        """The saved status of ``run_id`` (one small query, no transcript).

        Raises:
            RunNotFound: no run with this id.
        """
        return Status(self._column("status", run_id))

    def executor(self, run_id: str) -> str | None:
        """The worker that last took ``run_id`` up (None: none has yet).

        Raises:
            RunNotFound: no run with this id.
        """
        found = self._column("executor", run_id)
        return None if found is None else str(found)

    def _column(self, column: str, run_id: str) -> Any:
        rows = self._read(
            f"read the {column} of run {run_id!r}",
            f"SELECT {column} FROM runs WHERE run_id = %s",
            run_id,
        )
        if not rows:
            raise RunNotFound(f"no run {run_id!r} in {self._url}")
        return rows[0][0]

    def set_executor(self, run_id: str, executor: str | None) -> None:
        """Record ``executor`` as the worker executing ``run_id`` (None: no worker).

        Raises:
            RunNotFound: no run with this id.
        """
        with self._transaction(f"set the executor of run {run_id!r}") as conn:
            updated = conn.execute(
                "UPDATE runs SET executor = %s WHERE run_id = %s", (executor, run_id)
            ).rowcount
        if updated == 0:
            raise RunNotFound(f"no run {run_id!r} in {self._url}")

    # -- transactions -----------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, batched: bool = False) -> Iterator[Any]:
        """This thread's connection, in a transaction for the ``with`` block.

        Committed when the block ends, rolled back if it raises; psycopg
        errors come out as :class:`StoreError`. For SQL of other modules (a
        budget ledger) next to the store's tables. The store's own methods
        called inside the block join it, so they commit or roll back with it
        (each in a savepoint, unless the transaction is batched).

        ``batched``: the block gets a :class:`~._pgbatch.Batch` in place of the
        connection: its statements are sent together, with the next read of
        rows or with the commit (see :mod:`._pgbatch`). A statement's
        ``rowcount`` is not known: read it with ``RETURNING`` instead. Its
        errors are raised at the next read or at the commit.
        """
        with self._transaction("run a transaction", batched=batched) as conn:
            yield conn

    @contextlib.contextmanager
    def _transaction(self, doing: str, *, batched: bool = False) -> Iterator[Any]:
        """One transaction on this thread's connection (a savepoint if one is open;
        inside a batched one, a part of it).

        Callbacks given to :meth:`_on_commit` inside it run once the outermost
        transaction has committed; those of a block that failed are dropped.
        ``batched``: see :meth:`transaction` (an outermost transaction only).
        """
        local = self._local
        depth: int = getattr(local, "depth", 0)
        if depth == 0:
            local.after_commit = []
        mark = len(local.after_commit)
        with self._psycopg_errors(doing):
            conn = self._connection()
            local.depth = depth + 1
            try:
                with self._block(conn, batched=batched and depth == 0) as block:
                    yield block
            except BaseException:
                del local.after_commit[mark:]
                raise
            finally:
                local.depth = depth
        if depth == 0:
            callbacks, local.after_commit = local.after_commit, []
            for callback in callbacks:
                callback()

    @contextlib.contextmanager
    def _block(self, conn: Connection, *, batched: bool) -> Iterator[Any]:
        """What a transaction's block writes with: the open batch (inside a batched
        transaction), a new one, or ``conn`` in a transaction (or savepoint)."""
        joined: Batch | None = getattr(self._local, "batch", None)
        if joined is not None:
            yield joined
            return
        if not batched:
            with conn.transaction():
                yield conn
            return
        batch = self._local.batch = Batch(conn)
        try:
            yield batch
            batch.commit()
        except BaseException:
            batch.abandon()
            raise
        finally:
            self._local.batch = None

    def _write(self, doing: str) -> contextlib.AbstractContextManager[Any]:
        """One write transaction (a part of a caller's :meth:`transaction`), batched:
        a save is one round trip."""
        return self._transaction(doing, batched=True)

    def _on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the transaction open on this thread commits."""
        self._local.after_commit.append(callback)

    def _read(self, doing: str, sql: str, *params: object) -> list[TupleRow]:
        """The rows of one query (one statement: a consistent snapshot)."""

        def read() -> list[TupleRow]:
            with self._transaction(doing) as conn:
                rows: list[TupleRow] = conn.execute(sql.replace("?", "%s"), params).fetchall()
            return rows

        return self._reading(read)

    @contextlib.contextmanager
    def _psycopg_errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            if exc.sqlstate == FENCE_SQLSTATE:
                raise refusal(exc) from None
            text = " ".join(str(exc).split())
            conn = getattr(self._local, "conn", None)
            if conn is None or conn.closed:
                raise StoreUnreachable(
                    f"cannot reach PostgreSQL at {self._where}: cannot {doing}: {text}"
                ) from exc
            raise StoreError(f"PostgreSQL at {self._where}: cannot {doing}: {text}") from exc

    # -- connections ------------------------------------------------------

    def _connection(self) -> Connection:
        """This thread's open connection, made (or remade, if it broke) on demand."""
        self._refuse_if_closed()
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        self._local.conn = None
        fresh = self._connect()
        with self._lock:
            try:
                self._refuse_if_closed()  # closed while this thread connected
            except StateError:
                fresh.close()
                raise
            self._close_unused(conn)
            self._conns[threading.current_thread()] = fresh
        self._local.conn = fresh
        return fresh

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise StateError(f"the store at {self._url} is closed")

    def _close_unused(self, broken: Connection | None) -> None:
        """Close ``broken`` and the connections of threads that have ended (lock held)."""
        if broken is not None:
            broken.close()
        for thread in [t for t in self._conns if not t.is_alive()]:
            self._conns.pop(thread).close()

    def lock_rows(self, conn: Connection, sql: str, params: Sequence[object]) -> list[TupleRow]:
        """The rows of a locking read (``FOR UPDATE``) in ``conn``'s transaction,
        not held up by a stalled holder.

        A process frozen in the middle of one of its transactions (stopped,
        its VM paused) keeps that transaction's row locks. Such a holder,
        idle in its transaction for more than :data:`STALLED_S`, is ended
        (its transaction rolls back: it committed nothing) instead of being
        waited for; a live one, whose transactions last milliseconds, is
        waited for as usual.
        """
        for _ in range(3):
            try:
                with conn.transaction():  # a savepoint: a lock timeout undoes this alone
                    conn.execute(f"SET LOCAL lock_timeout = {int(STALLED_S * 1000)}")
                    rows = conn.execute(sql, params).fetchall()
                    conn.execute("SET LOCAL lock_timeout TO DEFAULT")
                    return rows
            except psycopg.errors.LockNotAvailable:
                conn.execute(_END_STALLED, (STALLED_S,))
        return conn.execute(sql, params).fetchall()

    def _connect(self) -> Connection:
        options: dict[str, Any] = {"autocommit": True}  # transactions are explicit
        given = conninfo_to_dict(self._dsn)
        if "connect_timeout" not in given:
            options["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in given:
            options["application_name"] = "orchestra"
        if "options" not in given:  # a frozen process's open transaction ends in time
            options["options"] = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
        try:
            return psycopg.connect(self._dsn, **options)
        except psycopg.Error as exc:
            text = " ".join(str(exc).split())
            raise StoreUnreachable(f"cannot reach PostgreSQL at {self._where}: {text}") from exc

    def _create_schema(self) -> None:
        with self._transaction("create the schema") as conn:
            conn.execute(_LOCK, ("orchestra schema",))
            create_or_migrate(conn, self._url)


def _one(cursor: psycopg.Cursor[TupleRow]) -> TupleRow:
    row = cursor.fetchone()
    if row is None:  # pragma: no cover - the statements always return one row
        raise StoreError("PostgreSQL returned no row")
    return row


def _children_running(conn: Connection, run_id: str) -> bool:
    """Whether a child of ``run_id`` is running (in ``conn``'s transaction)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE parent_id = %s AND status = %s)",
        (run_id, Status.RUNNING.value),
    ).fetchone()
    return bool(row and row[0])


def _head(state: RunState) -> str:
    """The state without its transcript, as JSON text; :class:`StateError` if it is not JSON."""
    try:
        return head_json(state)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise StateError(f"run {state.run_id!r} cannot be stored as JSON: {exc}") from exc


def _select_states(conn: Connection, where: str, params: Sequence[object]) -> list[RunState]:
    """The states (transcripts joined) of the runs ``where`` selects, in its order."""
    rows = conn.execute(_SELECT_STATES + where, params).fetchall()
    return [
        joined(head, [shared.message(run_id, i, data) for i, data in enumerate(messages)])
        for run_id, head, messages in rows
    ]


def _amended(state: RunState, tree: Usage, own: Usage | None) -> bool:
    """Set ``state``'s usage to the ledger's; whether it changed."""
    own = state.own if own is None else own
    if (state.tree, state.own) == (tree, own):
        return False
    state.tree, state.own = tree, own
    return True


def _stop(state: RunState, reason: str, now: float) -> None:
    """Make ``state`` a run interrupted by a cancel (as the Runner stops a cancelled run)."""
    state.status = Status.INTERRUPTED
    state.reason = reason
    state.interruption = Interruption(kind=InterruptionKind.CANCELLED, reason=reason)
    state.updated_at = now
