"""The PostgreSQL store: the SQLite store's behaviour, across connections, plus executors."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import orjson
import psycopg
import pytest

from orchestra._exceptions import (
    ConfigError,
    LeaseError,
    LeaseLost,
    RunNotFound,
    SchemaVersionError,
    StateError,
    StoreError,
    StoreUnreachable,
)
from orchestra._state import InterruptionKind, RunState, Status
from orchestra._stores.contract import StreamNote
from orchestra._stores.fence import Fence
from orchestra._stores.memory import Store
from orchestra._stores.serde import state_to_dict
from orchestra._stores.sqlite import SQLiteStore
from orchestra.distributed import _pgstore
from orchestra.distributed._pgstore import PG_SCHEMA_VERSION, PostgresStore, redacted

AnyStore = SQLiteStore | PostgresStore


def make_state(
    run_id: str = "r1",
    root_id: str | None = None,
    *,
    parent_id: str | None = None,
    created_at: float = 1000.0,
    updated_at: float = 1000.0,
    content: str = "hi",
) -> RunState:
    return RunState(
        run_id=run_id,
        root_id=root_id or run_id,
        parent_id=parent_id,
        agent="a",
        model="m",
        messages=[{"role": "user", "content": content}],
        created_at=created_at,
        updated_at=updated_at,
    )


def turns(state: RunState, n: int) -> None:
    for i in range(n):
        state.messages.append({"role": "assistant", "content": f"turn {i}"})


@contextmanager
def raw(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection to the test's database."""
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


def query(url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with raw(url) as conn:
        return conn.execute(sql, params).fetchall()


def message_versions(url: str, run_id: str = "r1") -> list[tuple[int, str]]:
    """Each stored message's index and the transaction that last wrote it (``xmin``)."""
    return query(url, "SELECT idx, xmin::text FROM messages WHERE run_id = %s ORDER BY idx", run_id)


def executor_of(url: str, run_id: str) -> str | None:
    rows = query(url, "SELECT executor FROM runs WHERE run_id = %s", run_id)
    return rows[0][0] if rows else None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def in_threads(*work: Callable[[], Any]) -> list[Any]:
    """Run each callable in a thread of its own, all released at once; their results."""
    results: list[Any] = [None] * len(work)
    start = threading.Barrier(len(work))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = work[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AnyStore]:
    """Each store in turn, for the behaviour both must share."""
    if request.param == "sqlite":
        with SQLiteStore(tmp_path / "runs.db") as s:
            yield s
    else:
        with PostgresStore(request.getfixturevalue("pg_url")) as p:
            yield p


# -- opening ----------------------------------------------------------------


def test_is_a_store(store: PostgresStore) -> None:
    typed: Store = store  # mypy checks the protocol; at runtime, the methods exist
    assert callable(typed.save) and callable(typed.load) and callable(typed.events)


def test_reopening_keeps_data(pg_url: str) -> None:
    with PostgresStore(pg_url) as first:
        first.save(make_state())
    with PostgresStore(pg_url) as second:
        assert second.load("r1") == make_state()


def test_processes_starting_at_once_create_the_schema_once(pg_url: str) -> None:
    opened = in_threads(*[lambda: PostgresStore(pg_url) for _ in range(6)])
    try:
        assert all(isinstance(s, PostgresStore) for s in opened), opened
    finally:
        for s in opened:
            if isinstance(s, PostgresStore):
                s.close()
    assert query(pg_url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]


def test_unknown_store_schema_version_refused(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    query(pg_url, "UPDATE orchestra_schema SET version = 99 RETURNING version")
    refused = f"store schema version 99; this Orchestra reads version {PG_SCHEMA_VERSION}"
    with pytest.raises(StateError, match=refused):
        PostgresStore(pg_url)


def test_a_version_1_database_is_migrated_to_epochs(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.save(make_state())
    with raw(pg_url) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN epoch")
        conn.execute("ALTER TABLE leases DROP COLUMN epoch")
        conn.execute("UPDATE orchestra_schema SET version = 1")
    with PostgresStore(pg_url) as store:
        claimed = store.claim("r1", "w1")
        assert claimed is not None and claimed[1].epoch == 1
        assert store.acquire_lease("r1", "me").epoch == 1
    assert query(pg_url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]


def test_a_version_2_database_gets_the_live_text_table(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.save(make_state())
    with raw(pg_url) as conn:
        conn.execute("DROP TABLE live_text")
        conn.execute("UPDATE orchestra_schema SET version = 2")
    with PostgresStore(pg_url) as store:
        store.note_stream("r1", "r1", StreamNote(text="so far", tokens=2))
        assert store.streaming_texts("r1") == {"r1": "so far"}
    assert query(pg_url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]


def _indexes(url: str) -> set[str]:
    return {name for (name,) in query(url, "SELECT indexname FROM pg_indexes")}


def test_a_version_3_database_gets_the_indexes_of_the_workers_queries(pg_url: str) -> None:
    from orchestra.distributed import PostgresLedger

    with PostgresStore(pg_url) as store:
        PostgresLedger(store=store, executor="w1").create()
    with raw(pg_url) as conn:
        conn.execute("DROP INDEX runs_running")
        conn.execute("DROP INDEX ledger_root_id")
        conn.execute("UPDATE orchestra_schema SET version = 3")
    assert not {"runs_running", "ledger_root_id"} & _indexes(pg_url)
    PostgresStore(pg_url).close()
    assert {"runs_running", "ledger_root_id"} <= _indexes(pg_url)
    assert query(pg_url, "SELECT version FROM orchestra_schema") == [(PG_SCHEMA_VERSION,)]


def test_a_version_3_database_without_a_ledger_gets_it_with_its_index(pg_url: str) -> None:
    from orchestra.distributed import PostgresLedger

    PostgresStore(pg_url).close()
    with raw(pg_url) as conn:
        conn.execute("UPDATE orchestra_schema SET version = 3")
    with PostgresStore(pg_url) as store:
        assert "ledger_root_id" not in _indexes(pg_url)
        PostgresLedger(store=store, executor="w1").create()
    assert "ledger_root_id" in _indexes(pg_url)


def test_unreachable_server_is_a_clear_store_error() -> None:
    port = closed_port()
    url = f"postgresql://orchestra:s3cret@127.0.0.1:{port}/runs?connect_timeout=5"
    with pytest.raises(
        StoreError, match=f"cannot reach PostgreSQL at 127.0.0.1:{port}/runs"
    ) as info:
        PostgresStore(url)
    assert "s3cret" not in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


@pytest.mark.parametrize(
    "url", ["sqlite:///tmp/runs.db", "/tmp/runs.db", "http://u:s3cret@host/db", "postgresql://h:x/"]
)
def test_not_a_postgresql_url(url: str) -> None:
    with pytest.raises(ConfigError, match="PostgreSQL") as info:
        PostgresStore(url)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:s3cret@h:5/db", "postgresql://u:***@h:5/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        (
            "postgresql://h/db?sslmode=require&password=s3cret",
            "postgresql://h/db?sslmode=require&password=***",
        ),
        ("postgres://u:p%40ss@h/db?Password=s3cret&x=1", "postgres://u:***@h/db?Password=***&x=1"),
    ],
)
def test_passwords_are_redacted(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_repr_and_url_never_show_the_password(pg_url: str, store: PostgresStore) -> None:
    assert repr(store) == f"PostgresStore({redacted(pg_url)!r})"
    assert store.url == redacted(pg_url)
    password = psycopg.conninfo.conninfo_to_dict(pg_url).get("password")
    if password:
        assert str(password) not in repr(store)


def test_closed_store_refuses_use(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.save(make_state())
    store.close()  # twice is fine
    with pytest.raises(StateError, match="closed"):
        store.load("r1")
    with pytest.raises(StateError, match="closed"):
        store.save(make_state())


# -- runs -------------------------------------------------------------------


def test_round_trip(any_store: AnyStore) -> None:
    state = make_state()
    state.status = Status.COMPLETED
    state.messages.append({"role": "assistant", "content": "hello ✓ \u0000 nul"})
    any_store.save(state)
    loaded = any_store.load("r1")
    assert loaded == state
    assert loaded is not state


def test_load_unknown_run(any_store: AnyStore) -> None:
    with pytest.raises(RunNotFound, match="'nope'"):
        any_store.load("nope")


def test_unknown_state_schema_version_refused_on_load(store: PostgresStore, pg_url: str) -> None:
    data = state_to_dict(make_state())
    data["schema_version"] = 99
    del data["messages"]
    query(
        pg_url,
        "INSERT INTO runs (run_id, root_id, agent, status, created_at, updated_at, state)"
        " VALUES ('r1', 'r1', 'a', 'running', 1, 1, %s) RETURNING run_id",
        orjson.dumps(data).decode(),
    )
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        store.load("r1")


def test_tree_root_first_then_by_creation(any_store: AnyStore) -> None:
    any_store.save(make_state("c20", "root", parent_id="root", created_at=20.0))
    any_store.save(make_state("c5", "root", parent_id="root", created_at=5.0))  # before the root
    any_store.save(make_state("root", created_at=10.0))
    any_store.save(make_state("c15", "c20", parent_id="c20", created_at=15.0))  # another tree
    any_store.save(make_state("c12", "root", parent_id="c20", created_at=12.0))
    any_store.save(make_state("B12", "root", parent_id="c20", created_at=12.0))  # id breaks ties
    assert [s.run_id for s in any_store.tree("root")] == ["root", "c5", "B12", "c12", "c20"]
    with pytest.raises(RunNotFound, match="'ghost'"):
        any_store.tree("ghost")


def test_list_runs_most_recently_updated_first(any_store: AnyStore) -> None:
    any_store.save(make_state("r1", updated_at=10.0))
    any_store.save(make_state("r2", updated_at=30.0))
    any_store.save(make_state("r3", updated_at=20.0))
    any_store.save(make_state("c1", "r1", parent_id="r1", updated_at=40.0))
    assert [s.run_id for s in any_store.list_runs()] == ["r2", "r3", "r1"]
    assert [s.run_id for s in any_store.list_runs(roots_only=False)] == ["c1", "r2", "r3", "r1"]
    assert [s.run_id for s in any_store.list_runs(limit=2)] == ["r2", "r3"]
    assert any_store.list_runs(limit=0) == []
    with pytest.raises(ConfigError):
        any_store.list_runs(limit=-1)


def test_resolve(any_store: AnyStore) -> None:
    for run_id in ("abc123", "abd456", "x_1", "x_10", "xy", "Abc"):
        any_store.save(make_state(run_id))
    assert any_store.resolve("abc") == "abc123"
    assert any_store.resolve("abd456") == "abd456"
    assert any_store.resolve("x_1") == "x_1"  # an exact id wins over longer ones
    assert any_store.resolve("x_10") == "x_10"
    assert any_store.resolve("A") == "Abc"  # case matters
    with pytest.raises(StateError, match="ambiguous: abc123, abd456"):
        any_store.resolve("ab")
    with pytest.raises(StateError, match="ambiguous: x_1, x_10 "):
        any_store.resolve("x_")  # not a wildcard: "xy" does not match
    with pytest.raises(RunNotFound, match="'zz'"):
        any_store.resolve("zz")
    with pytest.raises(RunNotFound):
        any_store.resolve("x%")  # no LIKE wildcards
    with pytest.raises(ConfigError):
        any_store.resolve("")


def test_save_keeps_executor_and_attempt(store: PostgresStore, pg_url: str) -> None:
    store.save(make_state())
    store.claim("r1", "w1")
    store.requeue("r1")
    store.set_executor("r1", "w2")
    store.save(make_state(content="later"))
    assert executor_of(pg_url, "r1") == "w2"
    assert store.attempt("r1") == 1


# -- transcripts: appended, not rewritten -------------------------------------


def test_a_save_writes_only_the_messages_added_since_the_last(
    store: PostgresStore, pg_url: str
) -> None:
    state = make_state()
    turns(state, 2)
    store.save(state)
    first = message_versions(pg_url)
    assert [idx for idx, _ in first] == [0, 1, 2]
    turns(state, 2)
    store.save(state)
    second = message_versions(pg_url)
    assert second[:3] == first  # untouched
    turns(state, 1)
    store.save(state)
    third = message_versions(pg_url)
    assert third[:5] == second
    assert len(third) == 6 and third[5][1] not in {xmin for _, xmin in second}
    store.save(state)  # nothing new: the run's row alone
    assert message_versions(pg_url) == third
    assert store.load("r1") == state


def test_a_transcript_that_does_not_extend_the_saved_one_is_written_whole(
    store: PostgresStore, pg_url: str
) -> None:
    state = make_state()
    turns(state, 5)
    store.save(state)
    before = {xmin for _, xmin in message_versions(pg_url)}
    loaded = store.load("r1")  # fresh message objects: the store cannot know them
    loaded.messages[1] = {"role": "assistant", "content": "rewritten"}
    store.save(loaded)
    after = message_versions(pg_url)
    assert len(after) == 6 and not before & {xmin for _, xmin in after}
    assert store.load("r1") == loaded
    shorter = make_state(content="shorter")
    store.save(shorter)
    assert query(pg_url, "SELECT count(*) FROM messages") == [(1,)]
    assert store.load("r1").messages == shorter.messages


def test_another_instance_reads_the_appended_transcript(pg_url: str) -> None:
    with PostgresStore(pg_url) as writer, PostgresStore(pg_url) as reader:
        state = make_state()
        for _ in range(3):
            turns(state, 2)
            writer.save(state)
            assert reader.load("r1").messages == state.messages


def test_a_corrupt_message_row_is_a_state_error(store: PostgresStore, pg_url: str) -> None:
    store.save(make_state())
    query(pg_url, "UPDATE messages SET data = '{nope' WHERE run_id = 'r1' RETURNING idx")
    with pytest.raises(StateError, match="message 0 of run 'r1' is not valid JSON"):
        store.load("r1")


# -- atomicity --------------------------------------------------------------


def test_save_many_is_all_or_none(any_store: AnyStore) -> None:
    a, b = make_state("a", content="old a"), make_state("b", content="old b")
    any_store.save_many([a, b])
    a.messages.append({"role": "assistant", "content": "new a"})
    b.messages.append({"role": "assistant", "content": object()})  # not JSON
    with pytest.raises(StateError, match="cannot be stored as JSON"):
        any_store.save_many([a, b])
    assert any_store.load("a").messages == [{"role": "user", "content": "old a"}]
    del b.messages[-1]
    any_store.save_many([a, b])
    assert [any_store.load(r).messages[-1]["content"] for r in "ab"] == ["new a", "old b"]


def test_a_batch_that_cannot_be_json_saves_nothing(store: PostgresStore, pg_url: str) -> None:
    good, bad = make_state("good"), make_state("bad")
    bad.metadata = {"note": object()}  # type: ignore[dict-item]
    event = {"run_id": "good", "root_id": "good", "type": "turn", "at": 1.0}
    with pytest.raises(StateError, match="run 'bad' cannot be stored as JSON"):
        store.save_many([good, bad], [event])
    assert query(pg_url, "SELECT count(*) FROM runs") == [(0,)]
    assert query(pg_url, "SELECT count(*) FROM messages") == [(0,)]
    assert store.events() == []


FAIL_ON_RUN = """
CREATE FUNCTION fail_on_bad() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_id = 'bad' THEN RAISE EXCEPTION 'simulated disk failure'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail BEFORE INSERT OR UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION fail_on_bad();
"""


def test_a_failing_statement_rolls_back_the_whole_save(store: PostgresStore, pg_url: str) -> None:
    store.save(make_state("good", content="old"))
    with raw(pg_url) as conn:
        conn.execute(FAIL_ON_RUN)
    newer = make_state("good", content="new")
    turns(newer, 3)
    event = {"run_id": "good", "root_id": "good", "type": "turn", "at": 1.0}
    with pytest.raises(StoreError, match="cannot save 2 runs: simulated disk failure") as info:
        store.save_many([newer, make_state("bad")], [event])
    assert isinstance(info.value.__cause__, psycopg.Error)
    assert store.load("good").messages == [{"role": "user", "content": "old"}]
    assert store.events() == []
    with raw(pg_url) as conn:
        conn.execute("DROP TRIGGER fail ON runs")
    store.save(newer)  # the store is still usable, and writes the whole transcript
    assert store.load("good") == newer


def test_save_with_events_stores_both_in_one_go(any_store: AnyStore) -> None:
    state = RunState(run_id="r1", root_id="r1", agent="a", model="m")
    event = {"run_id": "r1", "root_id": "r1", "type": "turn", "at": 1.0, "prompt_tokens": 3}
    any_store.save(state, [event])
    assert any_store.load("r1") == state
    assert any_store.events(run_id="r1") == [event]
    with pytest.raises(StateError):
        any_store.save(state, [{"run_id": "r1"}])  # a bad event: nothing is written
    assert any_store.events(run_id="r1") == [event]


def test_threads_get_a_connection_each(store: PostgresStore) -> None:
    all_connected = threading.Barrier(6)  # no thread ends (freeing its connection) too early

    def work(n: int) -> None:
        for i in range(10):
            store.save(make_state(f"t{n}-{i}"))
            store.add_events([{"run_id": f"t{n}-{i}", "root_id": "x", "type": "t", "at": i}])
        all_connected.wait(timeout=60)

    results = in_threads(*[lambda n=n: work(n) for n in range(6)])
    assert results == [None] * 6
    assert len(store.list_runs(limit=1000)) == 60
    assert len(store.events(root_id="x")) == 60
    assert len(store._conns) == 7  # six threads' and this one's
    in_threads(store.list_runs)  # a new thread: the ended threads' connections are closed
    assert len(store._conns) == 2
    held = list(store._conns.values())
    store.close()
    assert all(conn.closed for conn in held)


def test_a_read_on_a_dropped_connection_is_tried_again_on_a_fresh_one(
    store: PostgresStore, pg_url: str
) -> None:
    store.save(make_state())
    assert store._local.conn is not None
    pid = store._local.conn.info.backend_pid
    query(pg_url, "SELECT pg_terminate_backend(%s)", pid)  # as a server restart does
    assert store.load("r1") == make_state()
    assert store._local.conn.info.backend_pid != pid


def test_a_write_on_a_dropped_connection_fails_once_then_is_replaced(
    store: PostgresStore, pg_url: str
) -> None:
    store.save(make_state())
    assert store._local.conn is not None
    query(pg_url, "SELECT pg_terminate_backend(%s)", store._local.conn.info.backend_pid)
    with pytest.raises(StoreUnreachable, match=r"cannot reach PostgreSQL at .*: cannot save"):
        store.save(make_state(content="newer"))  # a write is not blindly repeated
    store.save(make_state(content="newer"))
    assert store.load("r1").messages[0]["content"] == "newer"


# -- events -----------------------------------------------------------------


def test_events_round_trip_in_order(any_store: AnyStore) -> None:
    events = [
        {"run_id": "r1", "root_id": "r1", "type": "run_started", "at": 1.5, "parent_id": None},
        {"run_id": "c1", "root_id": "r1", "type": "turn", "at": 1.0, "tokens": [1, 2]},
        {"run_id": "r2", "root_id": "r2", "type": "turn", "at": 0.5, "note": "é"},
        {"run_id": "r1", "root_id": "r1", "type": "turn", "at": 0.1},
    ]
    any_store.add_events(iter(events[:2]))
    any_store.add_events([])
    any_store.add_events(events[2:3])
    any_store.save(make_state("c1", "r1", parent_id="r1"), events[3:])
    assert any_store.events() == events
    assert any_store.events(run_id="r1") == [events[0], events[3]]
    assert any_store.events(root_id="r1") == [events[0], events[1], events[3]]
    assert any_store.events(run_id="c1", root_id="r1") == [events[1]]
    assert any_store.events(run_id="c1", root_id="r2") == []


def test_add_events_all_or_nothing(store: PostgresStore) -> None:
    good = {"run_id": "r1", "root_id": "r1", "type": "turn", "at": 1.0}
    with pytest.raises(StateError, match="needs at"):
        store.add_events([good, {"run_id": "r1", "root_id": "r1", "type": "turn"}])
    with pytest.raises(StateError, match="JSON"):
        store.add_events([good, {**good, "blob": object()}])
    assert store.events() == []


# -- cancel requests --------------------------------------------------------


def test_cancel_request_seen_by_another_instance(pg_url: str) -> None:
    with PostgresStore(pg_url) as runner_side, PostgresStore(pg_url) as cli_side:
        runner_side.save(make_state("root"))
        runner_side.save(make_state("child", "root", parent_id="root"))
        runner_side.save(make_state("other"))
        assert runner_side.pending_cancels("root") == {}
        cli_side.request_cancel("child", "user asked")
        cli_side.request_cancel("other", "elsewhere")
        assert runner_side.pending_cancels("root") == {"child": "user asked"}
        cli_side.request_cancel("child", "asked again")
        assert runner_side.pending_cancels("root") == {"child": "asked again"}
        assert list(runner_side.pending_cancels()) == ["other", "child"]  # oldest first
        runner_side.clear_cancel("child")
        runner_side.clear_cancel("child")  # twice is fine
        assert cli_side.pending_cancels("root") == {}
        assert cli_side.pending_cancels("other") == {"other": "elsewhere"}
        runner_side.clear_cancels("other")
        assert cli_side.pending_cancels() == {}


def test_cancel_unknown_run(any_store: AnyStore) -> None:
    with pytest.raises(RunNotFound, match="'ghost'"):
        any_store.request_cancel("ghost", "why not")
    assert any_store.pending_cancels("ghost") == {}


# -- leases -----------------------------------------------------------------


def test_lease_refused_while_valid_then_allowed_after_expiry(any_store: AnyStore) -> None:
    any_store.acquire_lease("root", "pid 1 on a", ttl=30.0, now=1000.0)
    with pytest.raises(LeaseError, match=r"'pid 1 on a' until .* \(20.0 s left\)"):
        any_store.acquire_lease("root", "pid 2 on b", ttl=30.0, now=1010.0)
    any_store.acquire_lease("root", "pid 2 on b", ttl=30.0, now=1031.0)
    with pytest.raises(LeaseError, match="'pid 2 on b'"):
        any_store.acquire_lease("root", "pid 1 on a", now=1032.0)
    any_store.acquire_lease("other", "pid 1 on a", now=1032.0)  # leases are per tree
    assert any_store.lease_holder("root", now=1032.0) == "pid 2 on b"
    assert any_store.lease_holder("root", now=1062.0) is None  # expired


def test_renew_and_release(any_store: AnyStore) -> None:
    any_store.acquire_lease("root", "me", ttl=30.0, now=1000.0)
    any_store.renew_lease("root", "me", ttl=30.0, now=1020.0)
    with pytest.raises(LeaseError, match="'me' until"):
        any_store.acquire_lease("root", "you", now=1045.0)
    with pytest.raises(LeaseError, match="'you' does not hold"):
        any_store.renew_lease("root", "you", now=1045.0)
    any_store.release_lease("root", "you")  # not theirs: nothing happens
    with pytest.raises(LeaseError):
        any_store.acquire_lease("root", "you", now=1045.0)
    any_store.release_lease("root", "me")
    any_store.acquire_lease("root", "you", now=1045.0)
    with pytest.raises(LeaseError, match="held by 'you'"):
        any_store.renew_lease("root", "me", now=1046.0)
    any_store.release_lease("root", "you")
    with pytest.raises(LeaseError, match="held by nobody"):
        any_store.renew_lease("root", "you", now=1047.0)


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_ttl(store: PostgresStore, ttl: float) -> None:
    with pytest.raises(ConfigError, match="ttl"):
        store.acquire_lease("root", "me", ttl=ttl)


def test_let_go_clears_the_trees_cancels_and_releases_its_lease(any_store: AnyStore) -> None:
    any_store.save(make_state("root"))
    any_store.save(make_state("other"))
    any_store.acquire_lease("root", "me")
    any_store.acquire_lease("other", "me")
    any_store.request_cancel("root", "stop")
    any_store.request_cancel("other", "stop")
    any_store.let_go("root", "me")
    assert any_store.pending_cancels() == {"other": "stop"}
    assert any_store.lease_holder("root") is None
    assert any_store.lease_holder("other") == "me"


def test_a_fenced_save_after_a_takeover_raises_lease_lost(pg_url: str) -> None:
    with PostgresStore(pg_url) as old, PostgresStore(pg_url) as new:
        old_fence = old.acquire_lease("root", "old", ttl=30.0, now=1000.0)
        old.save(make_state("root", content="by old"), fence=old_fence)
        new_fence = new.acquire_lease("root", "new", ttl=30.0, now=1031.0)  # old stalled
        assert (old_fence.epoch, new_fence.epoch) == (1, 2)
        child = make_state("child", "root", parent_id="root")
        event = {"run_id": "root", "root_id": "root", "type": "turn", "at": 1.0}
        with pytest.raises(
            LeaseLost, match=r"'old' lost the lease on run tree 'root' \(its epoch 1; .*'new'"
        ):
            old.save_many([make_state("root", content="late"), child], [event], fence=old_fence)
        with pytest.raises(LeaseLost):
            old.add_events([event], fence=old_fence)
        assert new.load("root").messages[0]["content"] == "by old"
        with pytest.raises(RunNotFound):
            new.load("child")
        assert new.events() == []
        new.save(make_state("root", content="by new"), fence=new_fence)
        nobody = attrs.evolve(old_fence, key="elsewhere")
        with pytest.raises(LeaseLost, match="nobody holds it now"):
            old.save(make_state("elsewhere"), fence=nobody)
        new.release_lease("root", "new")
        with pytest.raises(LeaseLost, match="nobody holds it now"):
            new.save(make_state("root"), fence=new_fence)
        assert new.acquire_lease("root", "old").epoch == 3  # never goes back after a release


def test_a_fenced_save_and_a_takeover_wait_for_each_other(pg_url: str) -> None:
    with PostgresStore(pg_url) as old, PostgresStore(pg_url) as new:
        old_fence = old.acquire_lease("root", "old", ttl=30.0, now=1000.0)
        taken: list[Any] = []
        with old.transaction():
            old.save(make_state("root", content="by old"), fence=old_fence)  # not committed
            taker = threading.Thread(
                target=lambda: taken.append(new.acquire_lease("root", "new", now=1031.0))
            )
            taker.start()
            taker.join(timeout=0.5)
            assert taker.is_alive()  # the takeover waits for the save
        taker.join(timeout=30)
        assert [fence.holder for fence in taken] == ["new"]
        saved: list[Any] = []

        def late_save() -> None:
            try:
                old.save(make_state("root", content="late"), fence=old_fence)
            except LeaseLost as exc:
                saved.append(exc)

        with new.transaction():
            new.acquire_lease("root", "new", now=1032.0)  # renewed, not committed
            saver = threading.Thread(target=late_save)
            saver.start()
            saver.join(timeout=0.5)
            assert saver.is_alive()  # the save waits for the takeover, then sees it
        saver.join(timeout=30)
        assert len(saved) == 1 and isinstance(saved[0], LeaseLost)
        assert new.load("root").messages[0]["content"] == "by old"


def test_a_takeover_waits_for_a_renewal_in_progress(pg_url: str) -> None:
    with PostgresStore(pg_url) as old, PostgresStore(pg_url) as new:
        old.acquire_lease("root", "old", ttl=30.0, now=1000.0)
        outcome: list[Any] = []

        def take_over() -> None:
            try:
                new.acquire_lease("root", "new", now=1040.0)  # the old lease has expired
            except LeaseError as exc:
                outcome.append(exc)

        with old.transaction():
            old.renew_lease("root", "old", ttl=30.0, now=1029.0)  # not committed
            taker = threading.Thread(target=take_over)
            taker.start()
            taker.join(timeout=0.5)
            assert taker.is_alive()
        taker.join(timeout=30)
        assert len(outcome) == 1 and "'old' until" in str(outcome[0])
        assert old.lease_holder("root", now=1040.0) == "old"


def test_stores_racing_for_a_lease_one_wins(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(6)]
    try:
        for _ in range(5):
            root = f"root-{time.monotonic_ns()}"
            results = in_threads(
                *[
                    lambda s=s, i=i, root=root: s.acquire_lease(root, f"owner {i}")
                    for i, s in enumerate(stores)
                ]
            )
            winners = [i for i, r in enumerate(results) if isinstance(r, Fence)]
            assert len(winners) == 1, results
            assert all(isinstance(r, LeaseError) for r in results if not isinstance(r, Fence))
            assert stores[0].lease_holder(root) == f"owner {winners[0]}"
    finally:
        for s in stores:
            s.close()


# -- transactions of other modules -------------------------------------------


def in_transaction(store: PostgresStore, *statements: str, fail: bool = False) -> None:
    """Run ``statements`` in one of the store's transactions, then raise if ``fail``."""
    with store.transaction() as conn:
        for statement in statements:
            conn.execute(statement)
        if fail:
            raise RuntimeError("changed my mind")


def test_transaction_commits_or_rolls_back(store: PostgresStore, pg_url: str) -> None:
    in_transaction(
        store, "CREATE TABLE ledger (amount INTEGER NOT NULL)", "INSERT INTO ledger VALUES (1)"
    )
    with pytest.raises(RuntimeError, match="changed my mind"):
        in_transaction(store, "INSERT INTO ledger VALUES (2)", fail=True)
    with pytest.raises(StoreError, match=r"cannot run a transaction: .*null value") as info:
        in_transaction(store, "INSERT INTO ledger VALUES (3)", "INSERT INTO ledger VALUES (NULL)")
    assert isinstance(info.value.__cause__, psycopg.errors.NotNullViolation)
    assert query(pg_url, "SELECT amount FROM ledger") == [(1,)]


def save_then_fail(store: PostgresStore, state: RunState) -> None:
    with store.transaction():
        store.save(state)
        assert store.load(state.run_id) == state  # seen inside the transaction
        raise RuntimeError("roll it all back")


def test_store_calls_inside_a_transaction_join_it(store: PostgresStore) -> None:
    state = make_state()
    turns(state, 2)
    with pytest.raises(RuntimeError, match="roll it all back"):
        save_then_fail(store, state)
    with pytest.raises(RunNotFound):
        store.load("r1")
    turns(state, 1)
    store.save(state)  # the rolled-back save was not counted: the whole transcript is written
    assert store.load("r1") == state
    with store.transaction():
        nobody = Fence(scope="lease", key="r2", holder="nobody", epoch=1)
        with pytest.raises(LeaseLost):
            store.save(make_state("r2"), fence=nobody)  # its savepoint rolls back alone
        store.save(make_state("r3"))
    assert [s.run_id for s in store.list_runs()] == ["r1", "r3"]


# -- executors --------------------------------------------------------------


def test_claim_a_running_run(store: PostgresStore, pg_url: str) -> None:
    state = make_state()
    turns(state, 2)
    store.save(state)
    first = store.claim("r1", "w1")
    assert first is not None and first[0] == state
    assert executor_of(pg_url, "r1") == "w1"
    second = store.claim("r1", "w2")  # a worker taking over (the first one died)
    assert second is not None and second[0] == state
    assert executor_of(pg_url, "r1") == "w2"
    assert (first[1].holder, first[1].epoch) == ("w1", 1)
    assert (second[1].holder, second[1].epoch) == ("w2", 2)
    assert store.claim("ghost", "w1") is None
    done = make_state("done")
    done.status = Status.COMPLETED
    store.save(done)
    assert store.claim("done", "w1") is None
    assert executor_of(pg_url, "done") is None


def test_a_worker_whose_claim_was_taken_over_saves_nothing(
    store: PostgresStore, pg_url: str
) -> None:
    """A worker declared dead that wakes up: every write under its old claim
    fails, in the transaction of the write, and leaves the successor's state."""
    state = make_state()
    store.save(state)
    stale = store.claim("r1", "w1")
    fresh = store.claim("r1", "w2")
    assert stale is not None and fresh is not None
    event = {"run_id": "r1", "root_id": "r1", "type": "turn", "at": 1.0}
    late = make_state(content="late")
    with pytest.raises(LeaseLost, match=r"'w1' lost the claim on run 'r1' \(its epoch 1; .*'w2'"):
        store.save(late, [event], fence=stale[1])
    with pytest.raises(LeaseLost):
        store.add_events([event], fence=stale[1])
    with pytest.raises(LeaseLost):
        store.check_fence(stale[1])
    store.check_fence(fresh[1])
    store.save(make_state(content="fresh"), [event], fence=fresh[1])
    assert store.load("r1").messages[0]["content"] == "fresh"
    assert len(store.events("r1")) == 1
    assert store.stop_running("r1", "stop") == ["r1"]  # a stop in the database fences too
    with pytest.raises(LeaseLost, match="its epoch 2"):
        store.save(make_state(content="after"), fence=fresh[1])
    assert store.load("r1").status is Status.INTERRUPTED


def test_stop_running_stops_every_running_run_of_the_tree(store: PostgresStore) -> None:
    store.save(make_state("root"))
    store.save(make_state("claimed", "root", parent_id="root"))
    store.save(make_state("elsewhere"))
    store.claim("claimed", "w1")
    assert store.stop_running("root", "worker gone") == ["claimed", "root"]
    assert {s.status for s in store.tree("root")} == {Status.INTERRUPTED}
    assert store.load("elsewhere").status is Status.RUNNING
    assert store.claim("claimed", "w2") is None


def test_stop_unclaimed_stops_only_queued_runs_of_the_tree(
    store: PostgresStore, pg_url: str
) -> None:
    root = make_state("root")
    turns(root, 3)
    store.save(root)
    store.save(make_state("queued", "root", parent_id="root"))
    store.save(make_state("claimed", "root", parent_id="root"))
    finished = make_state("finished", "root", parent_id="root")
    finished.status = Status.COMPLETED
    store.save(finished)
    store.save(make_state("elsewhere"))
    store.claim("claimed", "w1")
    versions = message_versions(pg_url, "root")
    before = time.time()

    assert store.stop_unclaimed("root", "user asked") == ["queued", "root"]

    for run_id in ("root", "queued"):
        stopped = store.load(run_id)
        assert stopped.status is Status.INTERRUPTED
        assert stopped.reason == "user asked"
        assert stopped.interruption is not None
        assert stopped.interruption.kind is InterruptionKind.CANCELLED
        assert stopped.interruption.reason == "user asked"
        assert stopped.updated_at >= before
    assert store.load("root").messages == root.messages
    assert message_versions(pg_url, "root") == versions  # the transcript is not rewritten
    assert store.load("claimed").status is Status.RUNNING
    assert store.load("finished").status is Status.COMPLETED
    assert store.load("elsewhere").status is Status.RUNNING
    assert query(pg_url, "SELECT status FROM runs WHERE run_id = 'queued'") == [("interrupted",)]
    assert store.stop_unclaimed("root", "again") == []
    assert store.claim("queued", "w1") is None


def test_a_stopped_run_saved_again_by_this_store_is_written_whole(store: PostgresStore) -> None:
    state = make_state()
    turns(state, 2)
    store.save(state)
    store.stop_unclaimed("r1", "stop")
    resumed = store.load("r1")
    resumed.status = Status.RUNNING
    turns(resumed, 1)
    store.save(resumed)
    assert store.load("r1") == resumed


def test_requeue_attempt_and_set_executor(store: PostgresStore, pg_url: str) -> None:
    store.save(make_state())
    assert store.attempt("r1") == 0
    store.set_executor("r1", "w1")
    assert executor_of(pg_url, "r1") == "w1"
    assert store.requeue("r1") == 1
    assert executor_of(pg_url, "r1") is None
    assert store.requeue("r1") == 2
    assert store.attempt("r1") == 2
    store.set_executor("r1", "w3")
    store.set_executor("r1", None)
    assert executor_of(pg_url, "r1") is None
    for call in (lambda: store.requeue("ghost"), lambda: store.attempt("ghost")):
        with pytest.raises(RunNotFound, match="'ghost'"):
            call()
    with pytest.raises(RunNotFound, match="'ghost'"):
        store.set_executor("ghost", "w1")


def test_claim_and_stop_racing_exactly_one_wins(pg_url: str) -> None:
    with PostgresStore(pg_url) as worker, PostgresStore(pg_url) as canceller:
        outcomes = set()
        for i in range(20):
            root = f"root-{i}"
            worker.save(make_state(root))
            claimed, stopped = in_threads(
                lambda root=root: worker.claim(root, "w1"),
                lambda root=root: canceller.stop_unclaimed(root, "user asked"),
            )
            state = worker.load(root)
            if claimed is not None:
                assert isinstance(claimed[0], RunState), claimed
                assert stopped == [], stopped
                assert state.status is Status.RUNNING
                assert executor_of(pg_url, root) == "w1"
                outcomes.add("claimed")
            else:
                assert stopped == [root], stopped
                assert state.status is Status.INTERRUPTED
                assert executor_of(pg_url, root) is None
                outcomes.add("stopped")
        assert outcomes  # which order won is up to the threads; each round had one winner


def test_stop_waits_for_a_claim_in_progress_and_then_leaves_the_run(
    store: PostgresStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a claim takes milliseconds; this one is held open for 0.5 s, so the stop's
    # patience with a stalled holder (see test_a_stop_does_not_wait_...) is raised
    monkeypatch.setattr(_pgstore, "STALLED_S", 5.0)
    store.save(make_state("root"))
    result: list[Any] = []
    with PostgresStore(pg_url) as worker, worker.transaction() as conn:
        conn.execute("UPDATE runs SET executor = 'w1' WHERE run_id = 'root'")  # not committed
        stopper = threading.Thread(target=lambda: result.append(store.stop_unclaimed("root", "x")))
        stopper.start()
        stopper.join(timeout=0.5)
        assert stopper.is_alive()  # blocked on the row lock
    stopper.join(timeout=30)
    assert result == [[]]
    assert store.load("root").status is Status.RUNNING


def test_claim_waits_for_a_stop_in_progress_and_then_finds_the_run_stopped(
    store: PostgresStore, pg_url: str
) -> None:
    store.save(make_state("root"))
    result: list[Any] = []
    with PostgresStore(pg_url) as canceller, canceller.transaction():
        assert canceller.stop_unclaimed("root", "x") == ["root"]  # not committed
        claimer = threading.Thread(target=lambda: result.append(store.claim("root", "w1")))
        claimer.start()
        claimer.join(timeout=0.5)
        assert claimer.is_alive()
    claimer.join(timeout=30)
    assert result == [None]
    assert store.load("root").status is Status.INTERRUPTED


def test_a_stop_does_not_wait_for_a_holder_frozen_inside_a_batch(pg_url: str) -> None:
    """A worker frozen between the read of a batched transaction (a budget
    decision: its fence's check and the lineage's rows) and its writes holds
    the run's row, share-locked. A cancel's stop ends that session instead of
    waiting for it (the chaos test once hung on such a holder for 240 s)."""
    bounded = f"{pg_url}?options=-c%20statement_timeout%3D20000"  # fails, never hangs
    with PostgresStore(pg_url) as frozen, PostgresStore(bounded) as canceller:
        frozen.save(make_state("root"))
        claimed = frozen.claim("root", "w1")
        assert claimed is not None
        opened = frozen.transaction(batched=True)
        batch = opened.__enter__()
        frozen.check_fence(claimed[1])
        assert batch.execute("SELECT 1").fetchone() == (1,)  # sent; then the worker froze
        began = time.monotonic()
        assert canceller.stop_running("root", "stop") == ["root"]
        assert time.monotonic() - began < 1.5  # as for an idle holder, below
        with pytest.raises(StoreError):  # the frozen session was ended
            opened.__exit__(None, None, None)


def test_a_stop_does_not_wait_for_a_frozen_holders_locks(pg_url: str) -> None:
    """A worker frozen inside a transaction keeps its row locks; a cancel's stop in
    the database ends that stalled session (its transaction rolls back) instead
    of waiting for it, and the frozen writer's work is not committed."""
    with PostgresStore(pg_url) as frozen, PostgresStore(pg_url) as canceller:
        frozen.save(make_state("root"))
        claimed = frozen.claim("root", "w1")
        assert claimed is not None
        opened = frozen.transaction()
        conn = opened.__enter__()  # a transaction the worker froze in
        frozen.save(make_state("root", content="uncommitted"), fence=claimed[1])
        began = time.monotonic()
        assert canceller.stop_running("root", "stop") == ["root"]
        # the stop ends the stalled session after 0.25 s: 1.5 s leaves 1.25 s for a
        # loaded machine's round trips, far below the lock's wait had it waited
        assert time.monotonic() - began < 1.5
        assert canceller.load("root").messages[0]["content"] == "hi"
        with pytest.raises(StoreError):  # the frozen session was ended
            opened.__exit__(None, None, None)
        assert conn.closed or conn.broken
        with pytest.raises(LeaseLost):  # and it is fenced out on waking
            frozen.save(make_state("root", content="late"), fence=claimed[1])
