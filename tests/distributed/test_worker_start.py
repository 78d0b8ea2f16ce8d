"""A worker that starts while its database is away waits for it (``--wait-for-db``).

Seen in every chaos run with a PostgreSQL restart, before: a worker started
(to replace a lost one) while the server restarted exited at once (8).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from distributed_support import (
    ROOT,
    _drop_system_database,
    finished,
    postgres_tool,
    wait_until,
)

from orchestra import Limits, Status, StoreUnreachable
from orchestra._recipes.recipe import Recipe
from orchestra.distributed import Cluster, submit
from orchestra.distributed._worker import Worker

READY_S = 90.0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port  # nothing listens there once the socket is closed


async def test_a_database_away_past_the_bound_is_given_up_after_it_said_once(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = Worker(
        database=f"postgresql://postgres@127.0.0.1:{_closed_port()}/orchestra",
        executor_id="w1",
        wait_for_db_s=5.0,
    )
    with pytest.raises(StoreUnreachable):
        await worker.serve()
    assert 4.0 <= trio.current_time() <= 5.0
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1, said
    assert said[0].startswith("worker w1: cannot reach PostgreSQL at 127.0.0.1:"), said
    assert said[0].endswith("waiting up to 5 s for it (--wait-for-db)"), said


def _log_has(log: Path, text: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"the worker exited ({proc.returncode}):\n{log.read_text()}"
    return text in log.read_text()


def test_a_worker_started_while_the_database_is_down_serves_once_it_is_up(
    pg_server: tuple[str, str | None], pg_url: str, tmp_path: Path, sandbox: Path
) -> None:
    state = pg_server[1]
    if state is None:
        pytest.skip("the server was given by URL alone: set ORCHESTRA_PG_STATE to stop it")
    log = tmp_path / "w1.log"
    stopped = postgres_tool("stop", "--dir", state)
    assert stopped.returncode == 0, stopped.stderr
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestra", "worker", "--store", pg_url, "--id", "w1"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_until(lambda: _log_has(log, "waiting up to 60 s", proc), READY_S, "the wait")
    finally:
        started = postgres_tool("start", "--dir", state)
    try:
        assert started.returncode == 0, started.stderr
        wait_until(lambda: _log_has(log, " ready (pid", proc), READY_S, "the worker ready")
        assert log.read_text().count("waiting up to") == 1, log.read_text()
        recipe = Recipe(directory=str(sandbox), scenario="plan")
        with Cluster(pg_url) as cluster:
            root = submit(cluster, recipe.agent(Limits()), "Why?", metadata=recipe.metadata())
            wait_until(lambda: finished(cluster, root), READY_S, "the run")
            assert cluster.store.load(root).status is Status.COMPLETED
    finally:
        proc.terminate()
        proc.wait(15)
        _drop_system_database(pg_url)
