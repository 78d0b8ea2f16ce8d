"""A transaction in as few round trips as it can take: its statements kept as SQL
text and sent together, with the next read or with the commit.

PostgreSQL's simple query protocol runs several statements sent in one
message, in order, in one transaction. So a transaction that only writes
(a save: its fence check, the run's row, its messages and events) is *one*
message with no ``BEGIN`` or ``COMMIT``: all of it commits, or (a statement
failing, a fence refused) none of it. One that reads first (a ledger
decision: its fence check and the lineage's rows, locked) is two: ``BEGIN``
and everything up to the read, then the writes and ``COMMIT``.

psycopg's pipeline mode saves round trips too, but spends far more of the
client's CPU per statement (each one prepared, bound and followed); a worker
makes several such transactions per model call, so this is most of its cost.
Parameters are bound by psycopg on the client side (:meth:`ClientCursor.mogrify`,
quoted as the server's settings require).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg
from psycopg.rows import TupleRow

__all__ = ["Batch"]


class Batch:
    """One transaction on an autocommit ``conn``: statements given to
    :meth:`execute` wait, as text, for a read of their rows (:meth:`Pending.fetchone`,
    :meth:`Pending.fetchall`) or for :meth:`commit`.

    Made by the store for one transaction, then dropped (not thread-safe).
    """

    def __init__(self, conn: psycopg.Connection[TupleRow]) -> None:
        self._cursor = psycopg.ClientCursor(conn)
        self._waiting: list[str] = []
        self._kept = 0  # statements kept so far: a Pending's number
        self._begun = False

    def execute(self, sql: str, params: Sequence[object] = ()) -> Pending:
        """Keep ``sql`` (bound to ``params``) for the next round trip."""
        self._waiting.append(self._cursor.mogrify(sql, params))
        self._kept += 1
        return Pending(self, self._kept)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> None:
        """:meth:`execute` once per row."""
        for row in rows:
            self.execute(sql, row)

    def cursor(self) -> Batch:
        """The batch itself (statements are run as :meth:`execute` runs them)."""
        return self

    def rows(self, pending: Pending) -> list[TupleRow]:
        """The rows of ``pending``, the last statement kept and not sent yet: sent
        now, after ``BEGIN`` if nothing was sent before (the transaction stays open).

        Raises:
            RuntimeError: ``pending`` is not that statement (its rows were read
                already, or another statement was kept after it).
        """
        if pending.index != self._kept or not self._waiting:
            raise RuntimeError("a batched statement's rows are read once, before the next is kept")
        statements = self._waiting if self._begun else ["BEGIN", *self._waiting]
        self._begun = True  # before sending: a statement failing leaves it to roll back
        self._send(statements)
        cursor = self._cursor
        while cursor.nextset():
            pass  # the results of the statements before it
        return cursor.fetchall() if cursor.description is not None else []

    def commit(self) -> None:
        """Send what waits, and ``COMMIT`` if a ``BEGIN`` was sent (otherwise the
        statements, sent in one message, are one transaction by themselves)."""
        if self._begun:
            self._send([*self._waiting, "COMMIT"])
        elif self._waiting:
            self._send(self._waiting)

    def rollback(self) -> None:
        """End the transaction, if one was begun, writing nothing."""
        if self._begun:
            self._waiting = []
            self._send(["ROLLBACK"])

    def abandon(self) -> None:
        """:meth:`rollback` after a failure; a connection that cannot is closed
        (its store makes a new one at its next use)."""
        try:
            self.rollback()
        except psycopg.Error:
            self._cursor.connection.close()

    def _send(self, statements: list[str]) -> None:
        self._waiting = []
        self._cursor.execute(";\n".join(statements), prepare=False)


class Pending:
    """A statement kept in a :class:`Batch`: its rows are read on demand."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: Batch, index: int) -> None:
        self.batch = batch
        self.index = index

    def fetchone(self) -> TupleRow | None:
        rows = self.batch.rows(self)
        return rows[0] if rows else None

    def fetchall(self) -> list[TupleRow]:
        return self.batch.rows(self)
