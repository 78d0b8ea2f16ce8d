"""Worker processes for the distributed tests: start N, kill one, stop all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from orchestra import Status
from orchestra.distributed import Cluster

ROOT = Path(__file__).resolve().parents[2]
READY_S = 90.0
DEAD_AFTER_S = 5
"""The workers' --dead-after: short, so a killed worker's runs move on quickly."""


class Workers:
    """``orchestra worker`` processes on one database (``python -m``, so that
    ``tests.distributed.agents`` imports), their logs in ``logs``."""

    def __init__(self, url: str, logs: Path, env: dict[str, str]) -> None:
        self.url, self.logs, self.env = url, logs, env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, concurrency: int = 3, *options: str) -> None:
        with (self.logs / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "orchestra",
                    "worker",
                    "--store",
                    self.url,
                    "--id",
                    name,
                    "--concurrency",
                    str(concurrency),
                    "--dead-after",
                    str(DEAD_AFTER_S),
                    *options,
                ],
                cwd=ROOT,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, *names: str) -> None:
        """Wait until the workers ``names`` (all if none) said they are ready."""
        deadline = time.monotonic() + READY_S
        for name in names or list(self.procs):
            proc = self.procs[name]
            log = self.logs / f"{name}.log"
            while b"ready" not in log.read_bytes():
                assert proc.poll() is None, f"worker {name} exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"worker {name} not ready:\n{log.read_text()}"
                time.sleep(0.05)

    def kill(self, name: str, how: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(how)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


@contextmanager
def workers(
    url: str,
    logs: Path,
    count: int,
    env: dict[str, str],
    concurrency: int = 3,
    inline: int | None = None,
    more: Sequence[str] = (),
) -> Iterator[Workers]:
    """``count`` ready workers (w1…), stopped after the block; DBOS's database dropped.

    ``inline``: their ``--inline-children`` (None: the default); ``more``: more options."""
    pool = Workers(url, logs, env)
    options = (*(() if inline is None else ("--inline-children", str(inline))), *more)
    try:
        for i in range(1, count + 1):
            pool.start(f"w{i}", concurrency, *options)
        pool.wait_ready()
        yield pool
    finally:
        pool.stop()
        _drop_system_database(url)


def _drop_system_database(url: str) -> None:
    from orchestra.distributed._dbos import system_url

    base, _, name = system_url(url).rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until(check: Any, timeout: float, what: str, said: Callable[[], str] | None = None) -> Any:
    """``check()`` once it is true; past ``timeout`` seconds, fail saying ``what``
    was waited for (and ``said()``: the state of things, if given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            context = "" if said is None else f"\n{said()}"
            raise AssertionError(f"timed out waiting for {what}{context}")
        time.sleep(0.02)


def told(cluster: Cluster, root_id: str, pool: Workers) -> str:
    """The tree's runs (status, turns, reason) and the tail of each worker's log:
    what a test that timed out waiting on them says."""
    rows = [
        f"  {s.run_id} (parent {s.parent_id}): {s.status.value}, {s.turns} turns, {s.reason!r}"
        for s in cluster.store.tree(root_id)
    ]
    logs = [f"-- {name}:\n{pool.log(name)[-1500:]}" for name in pool.procs]
    return "\n".join(["the tree:", *rows, *logs])


EXECUTORS = """
    SELECT r.run_id, COALESCE(s.executor, r.executor) FROM runs r
    LEFT JOIN runs s ON s.run_id = r.step_of WHERE r.root_id = %s
"""
"""Each run of a tree and the worker that last executed it (a run executed
inline: the worker of the run whose step executes it)."""


def executors(cluster: Cluster, root_id: str) -> dict[str, str | None]:
    """The worker that last executed each run of the tree."""
    with cluster.store.transaction() as conn:
        rows = conn.execute(EXECUTORS, (root_id,)).fetchall()
    return dict(rows)


def inline_runs(cluster: Cluster, root_id: str) -> set[str]:
    """The runs of the tree executed inline (inside another run's step)."""
    with cluster.store.transaction() as conn:
        rows = conn.execute(
            "SELECT run_id FROM runs WHERE root_id = %s AND step_of IS NOT NULL", (root_id,)
        ).fetchall()
    return {row[0] for row in rows}


def in_tool(cluster: Cluster, root_id: str, tool: str) -> set[str]:
    """Runs of the tree that started ``tool`` (per the stored events)."""
    return {
        e["run_id"]
        for e in cluster.store.events(root_id=root_id)
        if e["type"] == "tool_start" and e.get("tool") == tool
    }


def finished(cluster: Cluster, root_id: str) -> bool:
    return cluster.store.load(root_id).status is not Status.RUNNING


def postgres_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """``python tools/postgres.py ARGS…``."""
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "postgres.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
