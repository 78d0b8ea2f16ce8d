"""The command line's distributed side: ``orchestra worker`` and the commands
that, given ``--store postgresql://…``, act through the workers.

``demo``/``run`` submit the run to the workers and follow it from the store;
``cancel`` stops the whole tree wherever it runs; ``approve``/``reject``
record the decision and queue the tree again (any worker continues it);
``resume`` queues it again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import click
import trio

from .._events import EventSink
from .._exceptions import StoreUnreachable
from .._state import RunState, Status
from ._threads import while_away

__all__ = ["follow", "is_database", "run_worker"]

FOLLOW_POLL_S = 0.1
UNTAKEN_HINT_S = 5.0
SETTLE_S = 5.0
"""How long a stopped root's report waits for its runs on other workers to save their stops."""
_T = TypeVar("_T")

AWAY_POLL_S = 1.0
AWAY_LIMIT_S = 120.0
"""How long ``follow`` waits for an unreachable database to come back."""


def is_database(store: str | None) -> bool:
    """Whether a ``--store`` value names a PostgreSQL database (not a SQLite file)."""
    return store is not None and store.startswith(("postgresql://", "postgres://"))


def run_worker(
    database: str,
    *,
    executor_id: str | None,
    concurrency: int,
    inline_children: int,
    base_url: str | None,
    api_key: str,
    dead_after_s: float,
    wait_for_db_s: float,
    look_every_s: float = 1.0,
) -> None:
    """Serve as a worker until SIGINT or SIGTERM, then exit at once.

    The runs executing here are left as they are, as if the machine had gone:
    their workflows stay pending, and once this worker's heartbeat is older
    than ``dead_after_s`` a live worker has them queued again (a worker
    restarted under the same ``--id`` takes them back at once). Nothing is
    drained: a parent waiting for its children could take hours.

    A database away at the start (a restart) is waited for up to
    ``wait_for_db_s``.
    """
    from ._pgstore import redacted
    from ._worker import Worker

    options: dict[str, Any] = {
        "database": database,
        "concurrency": concurrency,
        "inline_children": inline_children,
        "dead_after_s": dead_after_s,
        "wait_for_db_s": wait_for_db_s,
        "look_every_s": look_every_s,
        "heartbeat_s": min(1.0, dead_after_s / 4),
    }
    if executor_id:
        options["executor_id"] = executor_id
    worker = Worker(base_url=base_url, model_api_key=api_key, **options)

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(lambda task_status: worker.serve(task_status=task_status))
                click.echo(
                    f"worker {worker.executor_id} ready (pid {os.getpid()}, {redacted(database)})",
                    err=True,
                )
                async for signum in signals:
                    click.echo(
                        f"{signal.Signals(signum).name}: stopped; the runs in flight here "
                        "continue on other workers",
                        err=True,
                    )
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(0)  # DBOS's threads and our runs stop with the process, as in a crash

    trio.run(main)


def follow(cluster: Any, run_id: str, *, timeout_s: float | None = None) -> list[RunState]:
    """Wait until the tree's root leaves ``running``; the tree's states.

    Says so on stderr, once, if no worker has taken the run after
    :data:`UNTAKEN_HINT_S` (none is running, or all are busy).
    """
    started = time.monotonic()
    hinted = False
    while True:
        root = _reachable(lambda: cluster.store.load(run_id))
        if root.status is not Status.RUNNING:
            return _settled(cluster, run_id)
        waited = time.monotonic() - started
        if timeout_s is not None and waited > timeout_s:
            return list(cluster.store.tree(run_id))
        if not hinted and waited > UNTAKEN_HINT_S and cluster.store.executor(run_id) is None:
            hinted = True
            click.echo(_untaken(run_id, cluster.store.url), err=True)
        time.sleep(FOLLOW_POLL_S)


def _settled(cluster: Any, run_id: str) -> list[RunState]:
    """The tree's states once none of its runs is ``running``: a child on another
    worker saves its stop a moment after its root's (a cancel reaches each
    worker's runs in turn); as they are after :data:`SETTLE_S` if one still is."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        states: list[RunState] = _reachable(lambda: cluster.store.tree(run_id))
        if all(s.status is not Status.RUNNING for s in states) or time.monotonic() > deadline:
            return states
        time.sleep(FOLLOW_POLL_S)


def _untaken(run_id: str, url: str) -> str:
    return (
        f"no worker has taken {run_id} yet: start one with orchestra worker --store {url} "
        "(Ctrl-C stops waiting; the run stays queued)"
    )


def _reachable(fn: Callable[[], _T]) -> _T:
    """``fn()``, tried again while the database is away (said once) for up to
    :data:`AWAY_LIMIT_S`."""
    return while_away(fn, patience_s=AWAY_LIMIT_S, poll_s=AWAY_POLL_S, on_away=_say_away)


class _Untaken:
    """Says once on stderr if no worker took the run :data:`UNTAKEN_HINT_S` after
    it was submitted (as :func:`follow` does)."""

    def __init__(self, cluster: Any, run_id: str) -> None:
        self.cluster, self.run_id = cluster, run_id
        self.since: float | None = time.monotonic()

    def __call__(self) -> None:
        if self.since is None or time.monotonic() - self.since < UNTAKEN_HINT_S:
            return
        self.since = None
        with contextlib.suppress(StoreUnreachable):
            if self.cluster.store.executor(self.run_id) is None:
                click.echo(_untaken(self.run_id, self.cluster.store.url), err=True)


def _database_away(since: float | None, exc: StoreUnreachable) -> float:
    """Note an outage (said once); raise it if it lasts past :data:`AWAY_LIMIT_S`."""
    now = time.monotonic()
    if since is None:
        _say_away(exc)
        return now
    if now - since > AWAY_LIMIT_S:
        raise exc
    return since


def _say_away(exc: StoreUnreachable) -> None:
    click.echo(f"{exc}; trying again for {AWAY_LIMIT_S:g} s", err=True)


class _Away:
    """Notes each failure to reach the database (said once; raised past the limit)."""

    def __init__(self) -> None:
        self.since: float | None = None

    def __call__(self, exc: StoreUnreachable) -> None:
        self.since = _database_away(self.since, exc)


def submit_and_follow(
    database: str, recipe: Any, limits: Any, task: str, sink: EventSink | None = None
) -> tuple[Any, float]:
    """Submit a CLI recipe's run to the workers and wait for its tree; (result, ms).

    With ``sink``, every event of the tree reaches it as it happens (text
    deltas included, each with its run's depth: see :mod:`._follow`).
    """
    from .._core.execute import new_run_id
    from .._exceptions import ConfigError
    from .._views.report import tree_result
    from ._client import Cluster, submit
    from ._follow import Follower, stream
    from ._pgstore import redacted

    if recipe.mcp:
        raise ConfigError("runs with MCP tools cannot be submitted to workers yet")
    with Cluster(database) as cluster, contextlib.ExitStack() as following:
        run_id = new_run_id()
        follower = None
        if sink is not None:  # following before the run exists: none of its events is missed
            follower = following.enter_context(contextlib.closing(Follower(database, run_id)))
            follower.open()
        started = time.monotonic()
        agent = recipe.agent(limits)
        metadata = recipe.metadata()
        submit(cluster, agent, task, limits=limits, metadata=metadata, run_id=run_id)
        click.echo(f"run {run_id} submitted to the workers of {redacted(database)}", err=True)
        click.echo(
            f"  stop it with: orchestra cancel {run_id} --store {redacted(database)}", err=True
        )
        if follower is not None and sink is not None:
            stream(follower, sink, away=_Away(), tick=_Untaken(cluster, run_id))
        states = follow(cluster, run_id)
        return tree_result(states, run_id), (time.monotonic() - started) * 1000


def cancel_everywhere(database: str, run_id: str, reason: str, wait_s: float) -> dict[str, Any]:
    """Cancel ``run_id``'s whole tree on every worker; what happened."""
    from ._client import Cluster, cancel_tree

    with Cluster(database) as cluster:
        asked = time.monotonic()
        states = cancel_tree(cluster, run_id, reason, wait_s)
        ms = (time.monotonic() - asked) * 1000
    still = [s.run_id for s in states if s.status is Status.RUNNING]
    return {
        "run_id": run_id,
        "root_id": states[0].root_id if states else run_id,
        "runs": dict(Counter(s.status.value for s in states)),
        "still_running": still,
        "stopped_after_ms": round(ms, 1),
    }


def requeue(database: str, run_id: str) -> str:
    """Queue ``run_id``'s tree again (after a decision, or to resume it); the workflow id."""
    from ._client import Cluster, resume_tree

    with Cluster(database) as cluster:
        return resume_tree(cluster, run_id)
