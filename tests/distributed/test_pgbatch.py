"""Batched transactions: statements sent together, bound on the client, atomic."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import pq

from orchestra._exceptions import LeaseLost, StoreError
from orchestra._state import RunState
from orchestra.distributed import PostgresStore
from orchestra.distributed._pgschema import PG_SCHEMA_VERSION


def make_state(content: str = "hi") -> RunState:
    return RunState(
        run_id="r1",
        root_id="r1",
        agent="a",
        model="m",
        messages=[{"role": "user", "content": content}],
        created_at=1000.0,
        updated_at=1000.0,
    )


def query(url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def messages_sent(store: PostgresStore, work: Callable[[], object]) -> list[str]:
    """The kinds of the protocol messages ``work`` sends on the store's connection
    (libpq's trace of this thread's connection)."""
    store.load("r1")  # this thread's connection, open
    conn = store._local.conn
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            work()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        lines = trace.read().splitlines()
    return [line.split("\t")[2] for line in lines if line.startswith("F\t")]


def test_a_fenced_save_is_one_message(store: PostgresStore) -> None:
    store.save(make_state())
    claimed = store.claim("r1", "w1")
    assert claimed is not None
    state = make_state("again")
    sent = messages_sent(store, lambda: store.save(state, fence=claimed[1]))
    assert sent == ["Query"]  # fence, run, messages, events: no BEGIN, no COMMIT
    assert store.load("r1").messages[0]["content"] == "again"


def test_a_read_then_writes_is_two_messages(store: PostgresStore) -> None:
    store.save(make_state())

    def decision() -> None:
        with store.transaction(batched=True) as batch:
            batch.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", ("r1",))
            assert batch.execute("SELECT status FROM runs").fetchone() == ("running",)
            batch.execute("UPDATE runs SET agent = %s WHERE run_id = %s", ("b", "r1"))

    assert messages_sent(store, decision) == ["Query", "Query"]
    assert query(store.path, "SELECT agent FROM runs") == [("b",)]


@pytest.mark.parametrize("read_first", [False, True], ids=["writes only", "read first"])
def test_a_failing_statement_writes_nothing_and_the_store_goes_on(
    store: PostgresStore, read_first: bool
) -> None:
    store.save(make_state())

    def failing() -> None:
        with store.transaction(batched=True) as batch:
            batch.execute("UPDATE runs SET agent = %s", ("written",))
            if read_first:
                assert batch.execute("SELECT count(*) FROM runs").fetchone() == (1,)
            batch.execute("SELECT 1 / 0")

    with pytest.raises(StoreError, match="division by zero"):
        failing()
    assert query(store.path, "SELECT agent FROM runs") == [("a",)]
    store.save(make_state("after"))  # the connection is usable: nothing left open
    assert store.load("r1").messages[0]["content"] == "after"


def test_an_exception_in_the_block_rolls_the_batch_back(store: PostgresStore) -> None:
    store.save(make_state())

    def failing() -> None:
        with store.transaction(batched=True) as batch:
            batch.execute("UPDATE runs SET agent = %s", ("read",))
            batch.execute("SELECT 1").fetchone()  # begun: the update was sent
            raise KeyError("the caller's own failure")

    with pytest.raises(KeyError):
        failing()
    assert query(store.path, "SELECT agent FROM runs") == [("a",)]
    assert store.load("r1").agent == "a"


HOSTILE = [
    "it's; DROP TABLE runs; --",
    "back\\slash \\' and %s %(x)s %% percent",
    "$$ dollar $q$ quotes $$",
    "ünïcødé ✓ 𝄞 and \u2028 line separator",
    "E'escape' \r\n\t",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_text_is_stored_as_given(store: PostgresStore, text: str) -> None:
    store.save(make_state(text))
    claimed = store.claim("r1", "w1")
    assert claimed is not None
    store.save(make_state(text + text), fence=claimed[1])
    assert store.load("r1").messages[0]["content"] == text + text
    assert query(store.path, "SELECT count(*) FROM runs") == [(1,)]


def test_numbers_lists_and_nulls_are_bound_as_given(store: PostgresStore) -> None:
    store.save(make_state())
    values = (2**62 + 1, -(2**40), 0.1 + 0.2, 1e-300, None, ["r1", "x'y"])
    with store.transaction(batched=True) as batch:
        row = batch.execute(
            "SELECT %s::bigint, %s::bigint, %s::float8, %s::float8, %s::text,"
            " (SELECT count(*) FROM runs WHERE run_id = ANY(%s))",
            values,
        ).fetchone()
    assert row == (*values[:5], 1)
    with store.transaction(batched=True) as batch:
        (infinite,) = batch.execute("SELECT %s::float8", (math.inf,)).fetchone()
    assert infinite == math.inf


def test_a_refused_fence_writes_nothing_and_says_who_holds_it(store: PostgresStore) -> None:
    store.save(make_state())
    stale = store.claim("r1", "w1")
    assert stale is not None and store.claim("r1", "w2") is not None
    with pytest.raises(LeaseLost, match=r"'w1' lost the claim on run 'r1' \(its epoch 1; .*'w2'"):
        store.save(make_state("late"), fence=stale[1])
    assert store.load("r1").messages[0]["content"] == "hi"


def test_a_version_6_database_gets_the_fence_function(store: PostgresStore) -> None:
    store.save(make_state())
    url = store.path
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION orchestra_fence(TEXT, TEXT, TEXT, BIGINT)")
        conn.execute("UPDATE orchestra_schema SET version = 6")
    with PostgresStore(url) as opened:
        claimed = opened.claim("r1", "w1")
        assert claimed is not None and opened.claim("r1", "w2") is not None
        with pytest.raises(LeaseLost, match="'w1' lost the claim"):
            opened.save(make_state("late"), fence=claimed[1])
    assert query(url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]


def test_rows_are_read_once_and_only_for_the_last_statement(store: PostgresStore) -> None:
    store.save(make_state())
    with store.transaction(batched=True) as batch:
        first = batch.execute("SELECT 1")
        assert first.fetchone() == (1,)
        with pytest.raises(RuntimeError, match="read once"):
            first.fetchone()  # sent already
        second = batch.execute("SELECT 2")
        with pytest.raises(RuntimeError, match="read once"):
            first.fetchall()  # another statement was kept after it
        assert second.fetchall() == [(2,)]
