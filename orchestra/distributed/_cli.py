"""The command line's distributed side: ``orchestra worker`` and the commands
that, given ``--store postgresql://…``, act through the workers.

``demo``/``run`` submit the run to the workers and follow it from the store;
``cancel`` stops the whole tree wherever it runs; ``approve``/``reject``
record the decision and queue the tree again (any worker continues it);
``resume`` queues it again.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from typing import Any

import click
import trio

from .._exceptions import StoreUnreachable
from .._state import RunState, Status

__all__ = ["follow", "is_database", "run_worker"]

FOLLOW_POLL_S = 0.1
UNTAKEN_HINT_S = 5.0
AWAY_POLL_S = 1.0
AWAY_LIMIT_S = 120.0
"""How long ``follow`` waits for an unreachable database to come back."""


def is_database(store: str | None) -> bool:
    """Whether a ``--store`` value names a PostgreSQL database (not a SQLite file)."""
    return store is not None and store.startswith(("postgresql://", "postgres://"))


def missing() -> str | None:
    """What to install for the distributed commands, if anything is missing."""
    try:
        import dbos  # noqa: F401
        import psycopg  # noqa: F401
    except ModuleNotFoundError as exc:
        return f"{exc.name} is missing: pip install 'orchestra[distributed]'"
    return None


def run_worker(
    database: str,
    executor_id: str | None,
    concurrency: int,
    base_url: str | None,
    api_key: str,
    dead_after_s: float,
    wait_for_db_s: float,
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
        "dead_after_s": dead_after_s,
        "wait_for_db_s": wait_for_db_s,
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
    away: float | None = None
    while True:
        try:
            root = cluster.store.load(run_id)
            if root.status is not Status.RUNNING:
                states: list[RunState] = cluster.store.tree(run_id)
                return states
        except StoreUnreachable as exc:
            away = _database_away(away, exc)
            time.sleep(AWAY_POLL_S)
            continue
        away = None
        waited = time.monotonic() - started
        if timeout_s is not None and waited > timeout_s:
            return list(cluster.store.tree(run_id))
        if not hinted and waited > UNTAKEN_HINT_S and cluster.store.executor(run_id) is None:
            hinted = True
            click.echo(
                f"no worker has taken {run_id} yet: start one with "
                f"orchestra worker --store {cluster.store.url} (Ctrl-C stops waiting; the run "
                "stays queued)",
                err=True,
            )
        time.sleep(FOLLOW_POLL_S)


def _database_away(since: float | None, exc: StoreUnreachable) -> float:
    """Note an outage (said once); raise it if it lasts past :data:`AWAY_LIMIT_S`."""
    now = time.monotonic()
    if since is None:
        click.echo(f"{exc}; trying again for {AWAY_LIMIT_S:g} s", err=True)
        return now
    if now - since > AWAY_LIMIT_S:
        raise exc
    return since


def submit_and_follow(database: str, recipe: Any, limits: Any, task: str) -> tuple[Any, float]:
    """Submit a CLI recipe's run to the workers and wait for its tree; (result, ms)."""
    from .._exceptions import ConfigError
    from .._views.report import tree_result
    from ._client import Cluster, submit
    from ._pgstore import redacted

    if recipe.mcp:
        raise ConfigError("runs with MCP tools cannot be submitted to workers yet")
    with Cluster(database) as cluster:
        started = time.monotonic()
        run_id = submit(
            cluster, recipe.agent(limits), task, limits=limits, metadata=recipe.metadata()
        )
        click.echo(
            f"run {run_id} submitted to the workers of {redacted(database)} (stop it with: "
            f"orchestra cancel {run_id} --store {redacted(database)})",
            err=True,
        )
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
