"""Following a tree's events over PostgreSQL: saved events by ``seq`` after each
notice, none lost to a missed notice or to commits out of ``seq`` order; live
batches from a publisher only for trees someone follows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
import trio

from orchestra import Event, Limits
from orchestra._core.execute import new_state
from orchestra.distributed import PostgresStore
from orchestra.distributed._follow import Follower
from orchestra.distributed._notify import EventPublisher, channel

ROOT = "run_follow_root"
CHILD = "run_follow_child"


def record(type_: str, run_id: str, at: float) -> dict[str, Any]:
    parent = None if run_id == ROOT else ROOT
    return {"type": type_, "run_id": run_id, "root_id": ROOT, "parent_id": parent, "at": at}


def insert(conn: psycopg.Connection[Any], event: dict[str, Any]) -> int:
    row = conn.execute(
        "INSERT INTO events (run_id, root_id, type, at, data) VALUES (%s, %s, %s, %s, %s)"
        " RETURNING seq",
        (event["run_id"], ROOT, event["type"], event["at"], orjson.dumps(event).decode()),
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def follower(store: PostgresStore, pg_url: str) -> Iterator[Follower]:
    from orchestra import Agent

    agent = Agent(name="a", model="m", instructions="")
    store.save(new_state(agent, "task", Limits(), run_id=ROOT))
    opened = Follower(pg_url, ROOT).open()
    try:
        yield opened
    finally:
        opened.close()


def seen(events: list[Event]) -> list[tuple[str, str, int]]:
    return [(e.run_id, e.type, e.depth) for e in events]


def test_an_event_committed_late_with_no_notice_is_still_read(
    follower: Follower, pg_url: str
) -> None:
    with (
        psycopg.connect(pg_url) as early,
        psycopg.connect(pg_url, autocommit=True) as late,
    ):
        early.execute("SET session_replication_role = replica")  # its commit notifies nobody
        first = insert(early, record("run_started", CHILD, 1.0))  # a lower seq, still open
        second = insert(late, record("run_started", ROOT, 2.0))  # committed (and notified) first
        assert first < second
        assert seen(follower.poll(5.0)) == [(ROOT, "run_started", 0)]
        early.commit()
    # no notice came for it: the next read (at most READ_EVERY_S later) finds it
    follower.read()
    assert seen(follower.merge.take()) == [(CHILD, "run_started", 1)]
    follower.read()
    assert follower.merge.take() == []


def test_a_saved_event_notifies_its_follower_once_committed(
    follower: Follower, pg_url: str
) -> None:
    follower.poll(0.0)  # the first read
    with psycopg.connect(pg_url) as conn:
        insert(conn, record("model_request", ROOT, 1.0))
        insert(conn, record("turn", ROOT, 2.0))
        time.sleep(0.1)  # uncommitted: nothing to see yet
        assert follower.poll(0.0) == []
    began = time.monotonic()
    got = follower.poll(5.0)
    assert seen(got) == [(ROOT, "model_request", 0), (ROOT, "turn", 0)]
    assert time.monotonic() - began < 1.0  # woken by the notice, not by the next read


def test_a_publisher_sends_only_trees_someone_follows(follower: Follower, pg_url: str) -> None:
    follower.poll(0.0)
    with psycopg.connect(pg_url, autocommit=True) as spy:
        spy.execute(f'LISTEN "{channel("run_nobody")}"')

        def event(run_id: str, root_id: str, type_: str, depth: int, **data: Any) -> Event:
            parent = None if run_id == root_id else root_id
            return Event(
                type=type_,
                run_id=run_id,
                root_id=root_id,
                parent_id=parent,
                at=time.time(),
                data=data,
                depth=depth,
            )

        async def publish() -> None:
            publisher = EventPublisher(pg_url, "w1")
            publisher(event(CHILD, ROOT, "model_request", 1, turn=1))
            publisher(event(CHILD, ROOT, "text_delta", 1, text="Hello", tokens=1))
            publisher(event("run_nobody", "run_nobody", "text_delta", 0, text="x", tokens=1))
            await publisher.flush()
            publisher(event("run_nobody", "run_nobody", "text_delta", 0, text="y", tokens=1))
            assert publisher._buffer == []  # known unfollowed: dropped at once
            publisher.close()

        trio.run(publish)
        got = follower.poll(5.0)
        assert seen(got) == [(CHILD, "model_request", 1), (CHILD, "text_delta", 1)]
        assert got[1].data == {"text": "Hello", "tokens": 1}
        assert list(spy.notifies(timeout=0.2)) == []


def test_the_console_store_shows_what_runs_on_workers_stream(
    store: PostgresStore, pg_url: str
) -> None:
    from distributed_support import wait_until

    from orchestra import Agent
    from orchestra.distributed._texts import FollowingStore

    agent = Agent(name="a", model="m", instructions="")
    store.save(new_state(agent, "task", Limits(), run_id=ROOT))

    def following() -> bool:
        with store.transaction() as conn:
            made = conn.execute("SELECT to_regclass('event_followers')").fetchone()
            if made is None or made[0] is None:
                return False  # not even the table yet
            return conn.execute("SELECT 1 FROM event_followers").fetchone() is not None

    def publish(*events: Event) -> None:
        async def send() -> None:
            publisher = EventPublisher(pg_url, "w1")
            for event in events:
                publisher(event)
            await publisher.flush()
            publisher.close()

        trio.run(send)

    def child(type_: str, **data: Any) -> Event:
        return Event(
            type=type_, run_id=CHILD, root_id=ROOT, parent_id=ROOT, at=time.time(), data=data,
            depth=1,
        )  # fmt: skip

    with FollowingStore(pg_url) as console:
        assert console.streaming_texts(ROOT) == {}  # follows the tree from now on
        wait_until(following, 10, "the console following the tree")
        publish(
            child("model_request", turn=1),
            child("text_delta", text="Hello", tokens=1),
            child("text_delta", text=" world", tokens=1),
        )
        wait_until(lambda: console.streaming_texts(ROOT) == {CHILD: "Hello world"}, 10, "the text")
        publish(child("turn", turn=1))
        wait_until(lambda: console.streaming_texts(ROOT) == {}, 10, "the text gone with its turn")
    assert not following()


def test_registrations_of_followers_gone_are_forgotten(follower: Follower, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO event_followers VALUES ('run_gone', 2147483000, 0)")
        Follower(pg_url, "run_other").open().close()
        rows = conn.execute("SELECT root_id FROM event_followers ORDER BY root_id").fetchall()
    assert rows == [(ROOT,)]  # the live follower's stays; the killed one's went


def test_the_report_of_a_stopped_root_waits_for_its_children_to_save_their_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cancelled root is saved a moment before a child on another worker saves
    its own stop: the CLI's report does not show that child ``running``."""
    from orchestra import Limits, RunState, Status
    from orchestra.distributed import _cli

    def state(run_id: str, status: Status) -> RunState:
        return RunState(run_id=run_id, root_id="r", agent="a", model="m", limits=Limits(),
                        messages=[], status=status)  # fmt: skip

    reads = iter([[Status.RUNNING], [Status.RUNNING], [Status.INTERRUPTED]])

    class Store:
        def load(self, run_id: str) -> RunState:
            return state("r", Status.INTERRUPTED)

        def tree(self, run_id: str) -> list[RunState]:
            (child,) = next(reads)
            return [state("r", Status.INTERRUPTED), state("c", child)]

    class Cluster:
        store = Store()

    monkeypatch.setattr(_cli, "FOLLOW_POLL_S", 0.0)
    states = _cli.follow(Cluster(), "r")
    assert [s.status for s in states] == [Status.INTERRUPTED, Status.INTERRUPTED]


def test_a_publisher_is_connected_before_its_first_batch(pg_url: str) -> None:
    """A worker's first tree does not wait for the publisher's connection (on a
    loaded machine, long enough for the tree's saved events to reach a follower
    first, which then drops the live ones)."""

    async def connected() -> bool:
        publisher = EventPublisher(pg_url, "w1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher.run)
            for _ in range(3000):  # 30 s; no event is published meanwhile
                if publisher._link._conn is not None:
                    nursery.cancel_scope.cancel()
                    return True
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return False

    assert trio.run(connected), "the publisher was not connected within 30 s"
