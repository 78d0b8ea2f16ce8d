"""The SQLite store: states, events, cancel requests and leases, across processes."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestra._exceptions import (
    ConfigError,
    LeaseError,
    LeaseLost,
    RunNotFound,
    SchemaVersionError,
    StateError,
    StoreError,
)
from orchestra._state import RunState, Status
from orchestra._stores import transcripts
from orchestra._stores.contract import StreamNote
from orchestra._stores.memory import Store
from orchestra._stores.serde import state_to_dict
from orchestra._stores.sqlite import STORE_SCHEMA_VERSION, SQLiteStore, default_store_path


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


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the store's file, committed and closed after."""
    with closing(sqlite3.connect(path)) as conn:
        yield conn
        conn.commit()


def run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(db) as s:
        yield s


# -- opening ----------------------------------------------------------------


def test_is_a_store(store: SQLiteStore) -> None:
    typed: Store = store  # mypy checks the protocol; at runtime, the methods exist
    assert callable(typed.save) and callable(typed.load) and callable(typed.add_events)


def test_creates_parent_directories_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "runs.db"
    with SQLiteStore(path) as store:
        assert store.path == path
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
        assert store._conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_reopening_keeps_data(db: Path) -> None:
    with SQLiteStore(db) as first:
        first.save(make_state())
    with SQLiteStore(db) as second:
        assert second.load("r1") == make_state()


def test_unknown_store_schema_version_refused(db: Path) -> None:
    SQLiteStore(db).close()
    with raw(db) as conn:
        conn.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    with pytest.raises(StateError, match="store schema version 99"):
        SQLiteStore(db)


def test_not_a_database_refused(db: Path) -> None:
    db.write_bytes(b"this is not a database, just some text that is long enough" * 20)
    with pytest.raises(StateError, match="not a database"):
        SQLiteStore(db)


def test_closed_store_refuses_use(db: Path) -> None:
    with SQLiteStore(db) as store:
        pass
    store.close()  # twice is fine
    with pytest.raises(StateError, match="closed"):
        store.load("r1")
    with pytest.raises(StateError, match="closed"):
        store.save(make_state())


def test_orchestra_store_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "from-env" / "store.db"
    monkeypatch.setenv("ORCHESTRA_STORE", str(path))
    assert default_store_path() == path
    with SQLiteStore() as store:
        store.save(make_state())
        assert store.path == path
    assert path.exists()


def test_xdg_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRA_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "orchestra" / "runs.db"


@pytest.mark.parametrize("xdg", [None, "", "relative/dir"])
def test_default_path_under_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: str | None
) -> None:
    monkeypatch.delenv("ORCHESTRA_STORE", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "share" / "orchestra" / "runs.db"
    assert default_store_path() == expected


# -- runs -------------------------------------------------------------------


def test_round_trip(store: SQLiteStore) -> None:
    state = make_state()
    state.status = Status.COMPLETED
    state.messages.append({"role": "assistant", "content": "hello ✓"})
    store.save(state)
    loaded = store.load("r1")
    assert loaded == state
    assert loaded is not state


def test_save_upserts_one_row(store: SQLiteStore, db: Path) -> None:
    store.save(make_state(content="first"))
    newer = make_state(content="second", updated_at=2000.0)
    newer.status = Status.FAILED
    store.save(newer)
    assert store.load("r1").messages[0]["content"] == "second"
    with raw(db) as conn:
        rows = conn.execute("SELECT run_id, status, updated_at FROM runs").fetchall()
    assert rows == [("r1", "failed", 2000.0)]


def test_load_unknown_run(store: SQLiteStore) -> None:
    with pytest.raises(RunNotFound, match="'nope'"):
        store.load("nope")


def test_unknown_state_schema_version_refused_on_load(store: SQLiteStore, db: Path) -> None:
    data = state_to_dict(make_state())
    data["schema_version"] = 99
    del data["messages"]
    with raw(db) as conn:
        conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("r1", "r1", None, "a", "running", 1.0, 1.0, json.dumps(data), 0),
        )
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        store.load("r1")


def test_tree_root_first_then_by_creation(store: SQLiteStore) -> None:
    store.save(make_state("c20", "root", parent_id="root", created_at=20.0))
    store.save(make_state("c5", "root", parent_id="root", created_at=5.0))  # before the root
    store.save(make_state("root", created_at=10.0))
    store.save(make_state("c15", "c20", parent_id="c20", created_at=15.0))  # another tree
    store.save(make_state("c12", "root", parent_id="c20", created_at=12.0))
    assert [s.run_id for s in store.tree("root")] == ["root", "c5", "c12", "c20"]


def test_tree_unknown(store: SQLiteStore) -> None:
    with pytest.raises(RunNotFound, match="'ghost'"):
        store.tree("ghost")


def test_list_runs_most_recently_updated_first(store: SQLiteStore) -> None:
    store.save(make_state("r1", updated_at=10.0))
    store.save(make_state("r2", updated_at=30.0))
    store.save(make_state("r3", updated_at=20.0))
    store.save(make_state("c1", "r1", parent_id="r1", updated_at=40.0))
    assert [s.run_id for s in store.list_runs()] == ["r2", "r3", "r1"]
    assert [s.run_id for s in store.list_runs(roots_only=False)] == ["c1", "r2", "r3", "r1"]
    assert [s.run_id for s in store.list_runs(limit=2)] == ["r2", "r3"]
    assert store.list_runs(limit=0) == []
    with pytest.raises(ConfigError):
        store.list_runs(limit=-1)


def test_resolve(store: SQLiteStore) -> None:
    for run_id in ("abc123", "abd456", "x_1", "x_10"):
        store.save(make_state(run_id))
    assert store.resolve("abc") == "abc123"
    assert store.resolve("abd456") == "abd456"
    assert store.resolve("x_1") == "x_1"  # an exact id wins over longer ones
    assert store.resolve("x_10") == "x_10"
    with pytest.raises(StateError, match="ambiguous: abc123, abd456"):
        store.resolve("ab")
    with pytest.raises(RunNotFound, match="'zz'"):
        store.resolve("zz")
    with pytest.raises(RunNotFound):
        store.resolve("x%")  # no LIKE wildcards
    with pytest.raises(ConfigError):
        store.resolve("")


# -- atomicity --------------------------------------------------------------


def test_failed_save_keeps_previous_state(store: SQLiteStore) -> None:
    store.save(make_state(content="old"))
    assert store._conn is not None
    store._conn.execute(
        "CREATE TEMP TRIGGER fail BEFORE UPDATE ON runs"
        " BEGIN SELECT RAISE(ABORT, 'simulated disk failure'); END"
    )
    with pytest.raises(StateError, match="simulated disk failure") as info:
        store.save(make_state(content="new"))
    assert isinstance(info.value.__cause__, sqlite3.Error)
    assert not store._conn.in_transaction
    assert store.load("r1").messages[0]["content"] == "old"
    store._conn.execute("DROP TRIGGER fail")
    store.save(make_state(content="newer"))  # the store is still usable
    assert store.load("r1").messages[0]["content"] == "newer"


def test_save_failing_to_serialise_keeps_previous_state(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save(make_state(content="old"))

    def boom(state: RunState) -> str:
        raise StateError("cannot serialise")

    monkeypatch.setattr(transcripts, "head_json", boom)
    with pytest.raises(StateError, match="cannot serialise"):
        store.save(make_state(content="new"))
    assert store.load("r1").messages[0]["content"] == "old"


CRASH_MID_SAVE = """
import os, sys
from orchestra._stores.sqlite import SQLiteStore
from orchestra._state import RunState

store = SQLiteStore(sys.argv[1])
store._conn.create_function("crash", 0, lambda: os._exit(3))
for op in ("INSERT", "UPDATE", "DELETE"):
    store._conn.execute(
        f"CREATE TEMP TRIGGER crash_{op} AFTER {op} ON runs BEGIN SELECT crash(); END"
    )
new = RunState(run_id="r1", root_id="r1", agent="a", model="m",
               messages=[{"role": "user", "content": "new"}])
store.save(new)
print("saved without crashing")
"""


def test_process_killed_mid_save_leaves_previous_state(store: SQLiteStore, db: Path) -> None:
    store.save(make_state(content="old"))
    child = run_child(CRASH_MID_SAVE, str(db))
    assert child.returncode == 3, child.stderr
    assert store.load("r1").messages[0]["content"] == "old"
    with SQLiteStore(db) as fresh:
        assert fresh.load("r1").messages[0]["content"] == "old"


def test_add_events_all_or_nothing(store: SQLiteStore) -> None:
    good = {"run_id": "r1", "root_id": "r1", "type": "turn", "at": 1.0}
    with pytest.raises(StateError, match="needs at"):
        store.add_events([good, {"run_id": "r1", "root_id": "r1", "type": "turn"}])
    with pytest.raises(StateError, match="JSON"):
        store.add_events([good, {**good, "blob": object()}])
    assert store._conn is not None
    store._conn.execute(
        "CREATE TEMP TRIGGER fail BEFORE INSERT ON events WHEN new.type = 'bad'"
        " BEGIN SELECT RAISE(ABORT, 'simulated failure'); END"
    )
    with pytest.raises(StateError, match="simulated failure"):
        store.add_events([good, {**good, "type": "bad"}])  # the first row was inserted
    assert store.events() == []


def test_threads_share_one_store(store: SQLiteStore) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                store.save(make_state(f"t{n}-{i}"))
                store.add_events([{"run_id": f"t{n}-{i}", "root_id": "x", "type": "t", "at": i}])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.list_runs(limit=1000)) == 160
    assert len(store.events(root_id="x")) == 160


# -- events -----------------------------------------------------------------


def test_events_round_trip_in_order(store: SQLiteStore) -> None:
    events = [
        {"run_id": "r1", "root_id": "r1", "type": "run_started", "at": 1.5, "parent_id": None},
        {"run_id": "c1", "root_id": "r1", "type": "turn", "at": 1.0, "tokens": [1, 2]},
        {"run_id": "r2", "root_id": "r2", "type": "turn", "at": 0.5, "note": "é"},
    ]
    store.add_events(iter(events[:2]))
    store.add_events([])
    store.add_events(events[2:])
    assert store.events() == events
    assert store.events(run_id="c1") == [events[1]]
    assert store.events(root_id="r1") == events[:2]
    assert store.events(run_id="c1", root_id="r2") == []


# -- cancel requests --------------------------------------------------------


def test_cancel_request_seen_by_another_instance(db: Path) -> None:
    with SQLiteStore(db) as runner_side, SQLiteStore(db) as cli_side:
        runner_side.save(make_state("root"))
        runner_side.save(make_state("child", "root", parent_id="root"))
        runner_side.save(make_state("other"))
        assert runner_side.pending_cancels("root") == {}
        cli_side.request_cancel("child", "user asked")
        cli_side.request_cancel("other", "elsewhere")
        assert runner_side.pending_cancels("root") == {"child": "user asked"}
        cli_side.request_cancel("child", "asked again")
        assert runner_side.pending_cancels("root") == {"child": "asked again"}
        runner_side.clear_cancel("child")
        runner_side.clear_cancel("child")  # twice is fine
        assert cli_side.pending_cancels("root") == {}
        assert cli_side.pending_cancels("other") == {"other": "elsewhere"}


def test_cancel_unknown_run(store: SQLiteStore) -> None:
    with pytest.raises(RunNotFound, match="'ghost'"):
        store.request_cancel("ghost", "why not")
    assert store.pending_cancels("ghost") == {}


# -- leases -----------------------------------------------------------------


def test_lease_refused_while_valid_then_allowed_after_expiry(store: SQLiteStore) -> None:
    store.acquire_lease("root", "pid 1 on a", ttl=30.0, now=1000.0)
    with pytest.raises(LeaseError, match=r"'pid 1 on a' until .* \(20.0 s left\)"):
        store.acquire_lease("root", "pid 2 on b", ttl=30.0, now=1010.0)
    store.acquire_lease("root", "pid 2 on b", ttl=30.0, now=1031.0)
    with pytest.raises(LeaseError, match="'pid 2 on b'"):
        store.acquire_lease("root", "pid 1 on a", now=1032.0)
    store.acquire_lease("other", "pid 1 on a", now=1032.0)  # leases are per tree


def test_same_owner_reacquires_and_extends(store: SQLiteStore) -> None:
    store.acquire_lease("root", "pid 1 on a", ttl=30.0, now=1000.0)
    store.acquire_lease("root", "pid 1 on a", ttl=30.0, now=1010.0)
    with pytest.raises(LeaseError, match=r"5.0 s left"):
        store.acquire_lease("root", "pid 2 on b", now=1035.0)


def test_renew_and_release(store: SQLiteStore) -> None:
    store.acquire_lease("root", "me", ttl=30.0, now=1000.0)
    store.renew_lease("root", "me", ttl=30.0, now=1020.0)
    with pytest.raises(LeaseError, match="'me' until"):
        store.acquire_lease("root", "you", now=1045.0)
    with pytest.raises(LeaseError, match="'you' does not hold"):
        store.renew_lease("root", "you", now=1045.0)
    store.release_lease("root", "you")  # not theirs: nothing happens
    with pytest.raises(LeaseError):
        store.acquire_lease("root", "you", now=1045.0)
    store.release_lease("root", "me")
    store.acquire_lease("root", "you", now=1045.0)
    with pytest.raises(LeaseError, match="held by 'you'"):
        store.renew_lease("root", "me", now=1046.0)
    store.release_lease("root", "you")
    with pytest.raises(LeaseError, match="held by nobody"):
        store.renew_lease("root", "you", now=1047.0)


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_ttl(store: SQLiteStore, ttl: float) -> None:
    with pytest.raises(ConfigError, match="ttl"):
        store.acquire_lease("root", "me", ttl=ttl)


ACQUIRE_IN_CHILD = """
import os, socket, sys
from orchestra._stores.sqlite import SQLiteStore

owner = f"pid {os.getpid()} on {socket.gethostname()}"
with SQLiteStore(sys.argv[1]) as store:
    store.acquire_lease("root", owner, ttl=60.0)
print(owner)
"""


def test_lease_held_by_another_process(store: SQLiteStore, db: Path) -> None:
    child = run_child(ACQUIRE_IN_CHILD, str(db))
    assert child.returncode == 0, child.stderr
    owner = child.stdout.strip()
    assert owner.startswith("pid ") and owner != f"pid {os.getpid()}"
    # The child has exited: its lease on this host is released at once, not after 60 s.
    store.acquire_lease("root", f"pid {os.getpid()} on {socket.gethostname()}")


def test_lease_of_a_live_process_is_refused(store: SQLiteStore) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        owner = f"pid {holder.pid} on {socket.gethostname()}"
        store.acquire_lease("root", owner, ttl=60.0)
        with pytest.raises(LeaseError, match=f"leased by '{owner}'"):
            store.acquire_lease("root", f"pid {os.getpid()} on {socket.gethostname()}")
        store.acquire_lease("root", "pid 0 on here", now=time.time() + 61.0)  # after it expires
    finally:
        holder.kill()
        holder.wait()


RACE_FOR_LEASE = """
import os, sys, time
from pathlib import Path
from orchestra._exceptions import LeaseError
from orchestra._stores.sqlite import SQLiteStore

db, ready, go = sys.argv[1:]
with SQLiteStore(db) as store:
    Path(ready).touch()
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        store.acquire_lease("root", f"pid {os.getpid()}")
    except LeaseError:
        print("refused")
    else:
        print("won", os.getpid())
"""


def test_processes_racing_for_a_lease_one_wins(
    store: SQLiteStore, db: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    readies = [tmp_path / f"ready-{i}" for i in range(6)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", RACE_FOR_LEASE, str(db), str(ready), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for ready in readies
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in readies) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:  # each waited for, its pipes closed, whatever happened
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=30)
    results = [out.split() for out, _ in outputs]
    assert all(child.returncode == 0 for child in children), [err for _, err in outputs]
    winners = [r for r in results if r[0] == "won"]
    assert len(winners) == 1, results
    assert sum(r == ["refused"] for r in results) == 5
    with pytest.raises(LeaseError, match=f"leased by 'pid {winners[0][1]}'"):
        store.acquire_lease("root", "latecomer")


def test_save_with_events_stores_both_in_one_go(store: SQLiteStore) -> None:
    state = RunState(run_id="r1", root_id="r1", agent="a", model="m")
    event = {"run_id": "r1", "root_id": "r1", "type": "turn", "at": 1.0, "prompt_tokens": 3}
    store.save(state, [event])
    assert store.load("r1") == state
    assert store.events(run_id="r1") == [event]
    with pytest.raises(StateError):
        store.save(state, [{"run_id": "r1"}])  # a bad event: nothing is written
    assert store.events(run_id="r1") == [event]


# -- transcripts: appended, not rewritten -------------------------------------


def turns(state: RunState, n: int) -> None:
    for i in range(n):
        state.messages.append({"role": "assistant", "content": f"turn {i}"})


def rows_written(store: SQLiteStore, state: RunState) -> int:
    """How many rows one save inserts or changes."""
    assert store._conn is not None
    before = store._conn.total_changes
    store.save(state)
    return store._conn.total_changes - before


def test_a_save_writes_only_the_messages_added_since_the_last(store: SQLiteStore) -> None:
    state = make_state()
    turns(state, 500)
    assert rows_written(store, state) == 1 + 501  # the run's row, every message
    state.messages.append({"role": "user", "content": "one more"})
    assert rows_written(store, state) == 1 + 1
    assert rows_written(store, state) == 1  # nothing new: the row alone
    assert store.load("r1") == state


def test_a_transcript_that_does_not_extend_the_saved_one_is_written_whole(
    store: SQLiteStore,
) -> None:
    state = make_state()
    turns(state, 5)
    store.save(state)
    loaded = store.load("r1")  # fresh message objects: the store cannot know them
    loaded.messages[1] = {"role": "assistant", "content": "rewritten"}
    assert rows_written(store, loaded) == 1 + 6 + 6  # the row; 6 messages deleted, 6 written
    assert store.load("r1") == loaded
    shorter = make_state(content="shorter")
    assert rows_written(store, shorter) == 1 + 6 + 1
    assert store.load("r1").messages == shorter.messages


def test_another_instance_reads_the_appended_transcript(db: Path) -> None:
    with SQLiteStore(db) as writer, SQLiteStore(db) as reader:
        state = make_state()
        for _ in range(3):
            turns(state, 2)
            writer.save(state)
            assert reader.load("r1").messages == state.messages


def test_save_many_is_all_or_none(store: SQLiteStore) -> None:
    a, b = make_state("a", content="old a"), make_state("b", content="old b")
    store.save_many([a, b])
    a.messages.append({"role": "assistant", "content": "new a"})
    b.messages.append({"role": "assistant", "content": object()})  # not JSON
    with pytest.raises(StateError, match="cannot be stored as JSON"):
        store.save_many([a, b])
    assert store.load("a").messages == [{"role": "user", "content": "old a"}]
    del b.messages[-1]
    store.save_many([a, b])
    assert [store.load(r).messages[-1]["content"] for r in "ab"] == ["new a", "old b"]


def test_a_corrupt_message_row_is_a_state_error(store: SQLiteStore, db: Path) -> None:
    store.save(make_state())
    with raw(db) as conn:
        conn.execute("UPDATE messages SET data = '{nope' WHERE run_id = 'r1'")
    with pytest.raises(StateError, match="message 0 of run 'r1' is not valid JSON"):
        store.load("r1")


V1_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
INSERT INTO meta VALUES ('schema_version', 1);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, root_id TEXT NOT NULL, parent_id TEXT,
    agent TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, state TEXT NOT NULL);
CREATE INDEX runs_root_id ON runs (root_id);
CREATE INDEX runs_updated_at ON runs (updated_at);
CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,
    root_id TEXT NOT NULL, type TEXT NOT NULL, at REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX events_run_id ON events (run_id);
CREATE INDEX events_root_id ON events (root_id);
CREATE TABLE cancels (run_id TEXT PRIMARY KEY, root_id TEXT NOT NULL, reason TEXT NOT NULL,
    requested_at REAL NOT NULL);
CREATE INDEX cancels_root_id ON cancels (root_id);
CREATE TABLE leases (root_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL);
"""


def test_a_version_1_file_is_migrated_in_place(db: Path) -> None:
    old = make_state()
    turns(old, 3)
    with raw(db) as conn:
        conn.executescript(V1_TABLES)
        conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ("r1", "r1", None, "a", "running", 1.0, 1.0, json.dumps(state_to_dict(old))),
        )
    with SQLiteStore(db) as store:
        assert store.load("r1") == old
        turns(old, 1)
        store.save(old)
    with SQLiteStore(db) as store, raw(db) as conn:
        assert store.load("r1") == old
        assert conn.execute("SELECT value FROM meta").fetchone() == (STORE_SCHEMA_VERSION,)
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (5,)


def _event(run_id: str, root_id: str, type_: str) -> dict[str, object]:
    return {"run_id": run_id, "root_id": root_id, "type": type_, "at": 1.0}


def _indexes(conn: sqlite3.Connection) -> dict[str, str]:
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql != ''")
    return dict(rows.fetchall())


def test_a_version_4_file_gets_the_live_text_table(db: Path) -> None:
    with SQLiteStore(db) as store:
        store.save(make_state("root"))
    with raw(db) as conn:
        conn.execute("DROP TABLE live_text")
        conn.execute("UPDATE meta SET value = 4 WHERE key = 'schema_version'")
    with SQLiteStore(db) as store, raw(db) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone() == (STORE_SCHEMA_VERSION,) == (5,)
        store.note_stream("root", "root", StreamNote(text="so far", tokens=2))
        assert store.streaming_texts("root") == {"root": "so far"}
        assert store.load("root").run_id == "root"


def test_a_version_2_file_keeps_its_runs_and_events_and_loses_two_index_writes(db: Path) -> None:
    # version 2 indexed events by run as well as by tree, and every run by recency
    with SQLiteStore(db) as store:
        store.save(make_state("root"), [_event("root", "root", "run_started")])
        store.save(make_state("child", root_id="root"), [_event("child", "root", "turn")])
    with raw(db) as conn:
        conn.execute("CREATE INDEX events_run_id ON events (run_id)")
        conn.execute("DROP INDEX runs_updated_at")
        conn.execute("CREATE INDEX runs_updated_at ON runs (updated_at)")
        conn.execute("ALTER TABLE leases DROP COLUMN epoch")  # version 4's
        conn.execute("UPDATE meta SET value = 2 WHERE key = 'schema_version'")
    with SQLiteStore(db) as store, raw(db) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone() == (STORE_SCHEMA_VERSION,)
        assert store.acquire_lease("root", "me").epoch == 1  # version 4: leases have epochs
        assert "events_run_id" not in _indexes(conn)
        assert _indexes(conn)["runs_updated_at"].endswith("WHERE run_id = root_id")
        assert [e["type"] for e in store.events(run_id="child")] == ["turn"]
        assert [e["type"] for e in store.events(root_id="root")] == ["run_started", "turn"]
        assert [s.run_id for s in store.list_runs()] == ["root"]


def test_events_are_read_through_the_tree_index(store: SQLiteStore) -> None:
    # a store with many trees must not scan every event to show one run or one tree
    store.save(make_state("child", root_id="root"), [_event("child", "root", "turn")])
    plans: list[str] = []
    conn = store._connection()
    conn.set_trace_callback(
        lambda sql: (
            plans.append(str(conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()))
            if sql.startswith("SELECT data FROM events")
            else None
        )
    )
    assert len(store.events(root_id="root")) == len(store.events(run_id="child")) == 1
    assert len(store.events(run_id="child", root_id="root")) == 1
    conn.set_trace_callback(None)
    assert len(plans) == 3
    assert all("USING INDEX events_root_id" in plan for plan in plans), plans


def test_every_taking_of_a_lease_fences_out_the_ones_before(store: SQLiteStore) -> None:
    first = store.acquire_lease("root", "me", ttl=30.0, now=1000.0)
    store.save(make_state("root"), fence=first)
    again = store.acquire_lease("root", "me", ttl=30.0, now=1001.0)  # same owner, new taking
    assert (first.epoch, again.epoch) == (1, 2)
    with pytest.raises(LeaseLost, match=r"'me' lost the lease on run tree 'root' \(its epoch 1"):
        store.save(make_state("root"), fence=first)
    with pytest.raises(LeaseLost):
        store.add_events([_event("root", "root", "turn")], fence=first)
    store.save(make_state("root"), fence=again)
    store.release_lease("root", "me")
    with pytest.raises(LeaseLost, match="nobody holds it now"):
        store.save(make_state("root"), fence=again)
    assert store.lease_holder("root") is None
    assert store.acquire_lease("root", "you").epoch == 3  # a release never resets the count


def test_let_go_clears_the_trees_cancels_and_releases_its_lease(store: SQLiteStore) -> None:
    store.save(make_state("root"))
    store.save(make_state("other"))
    store.acquire_lease("root", "me")
    store.acquire_lease("other", "me")
    store.request_cancel("root", "stop")
    store.request_cancel("other", "stop")
    store.let_go("root", "me")
    assert store.pending_cancels() == {"other": "stop"}
    assert store.lease_holder("root") is None
    assert store.lease_holder("other") == "me"


def _refused_once(real: Any) -> Any:
    """``real``, refused the first time as SQLite refuses a lock it will not wait for."""
    calls: list[int] = []

    def once(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            cause = sqlite3.OperationalError("database is locked")
            raise StoreError("cannot open the store: database is locked") from cause
        return real(*args)

    return once


@pytest.mark.parametrize("step", ["_configure", "SQLiteStore._create_or_migrate"])
def test_a_lock_refused_at_once_while_opening_is_waited_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """What two threads opening one new file meet now and then ("database is
    locked" from the switch to WAL or the tables' creation, not waited for)."""
    from orchestra._stores import sqlite as module

    owner: Any = module if "." not in step else module.SQLiteStore
    name = step.rpartition(".")[2]
    monkeypatch.setattr(owner, name, _refused_once(getattr(owner, name)))
    pauses: list[float] = []
    monkeypatch.setattr(module.time, "sleep", pauses.append)
    store = SQLiteStore(tmp_path / "new.db")
    assert store.list_runs() == [] and len(pauses) == 1
    store.close()


def test_an_error_that_is_not_a_lock_is_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestra._stores import sqlite as module

    pauses: list[float] = []
    monkeypatch.setattr(module.time, "sleep", pauses.append)
    (tmp_path / "x.db").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="not a database"):
        SQLiteStore(tmp_path / "x.db")
    assert pauses == []


def test_threads_opening_one_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    for round_ in range(10):
        path = tmp_path / f"s{round_}.db"
        barrier = threading.Barrier(4)

        def open_it(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                SQLiteStore(path).close()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
