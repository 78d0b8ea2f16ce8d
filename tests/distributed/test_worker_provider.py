"""A run submitted to the workers calls its model as the same command would embedded.

``orchestra run --store postgresql://…`` saves the run's recipe; the worker
that executes it builds its provider, retries, prices and margin from that
recipe with the function the embedded path uses
(:meth:`~orchestra._recipes.recipe.Recipe.model_calls`). Checked here with
real worker processes: a ``--request-timeout`` that a ``hang`` fault trips
(the provider's default is 120 s), and a ``--wait-for-server`` that outlasts
an endpoint still starting (without it a refused connection fails the run at
once); and in this process, that the worker's provider carries
``--provider-name`` and the rest.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed_support import ROOT, wait_until, workers

from orchestra import Limits
from orchestra._core.execute import new_state
from orchestra._recipes.recipe import Recipe
from orchestra.distributed import PostgresLedger, PostgresStore
from orchestra.distributed._worker import Worker

ORCHESTRA = [sys.executable, "-m", "orchestra"]
RUN_S = 60.0
"""Well under the provider's default timeout (120 s): a run that waits that
long for a hung reply was built without its ``--request-timeout``."""


def _run(url: str, sandbox: Path, database: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``orchestra run`` submitted to the workers of ``database``, followed to its end."""
    return subprocess.run(
        [
            *ORCHESTRA,
            *("run", "Why did the job fail?", "--base-url", url, "--dir", str(sandbox)),
            *("--store", database, "--json", "--price-in", "2", "--price-out", "12", *extra),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, (done.stdout, done.stderr)
    report: dict[str, object] = json.loads(done.stdout)
    return report


def _events(database: str, run_id: str, kind: str) -> list[dict[str, object]]:
    with PostgresStore(database) as store:
        return [e for e in store.events(root_id=run_id) if e["type"] == kind]


def test_a_request_timeout_given_at_submit_holds_on_the_worker(
    pg_url: str, tmp_path: Path, sandbox: Path, server_url: str
) -> None:
    model = f"plan+hang@{uuid.uuid4().hex[:8]}"  # the first request hangs, the next answer
    with workers(pg_url, tmp_path, 1, {}):
        started = time.monotonic()
        done = _run(server_url, sandbox, pg_url, "--model", model, "--request-timeout", "1")
        took = time.monotonic() - started
    report = _report(done)
    assert report["status"] == "completed", report
    # the hang is timed out and retried; on a loaded machine a reply may also take
    # more than 1 s and be retried too: the first retry is the hang's
    retry, *_ = _events(pg_url, str(report["run_id"]), "model_retry")
    assert retry["attempt"] == 2 and "ReadTimeout" in str(retry["error"]), retry
    assert took < 30, took


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def late_server() -> Iterator[tuple[str, threading.Event]]:
    """A URL nothing serves yet, and an event that starts ``serve-scripted`` on it."""
    port = _free_port()
    go = threading.Event()
    procs: list[subprocess.Popen[bytes]] = []

    def serve() -> None:
        go.wait()
        command = [*ORCHESTRA, "serve-scripted", "--port", str(port)]
        procs.append(subprocess.Popen(command, stderr=subprocess.DEVNULL))

    starter = threading.Thread(target=serve, daemon=True)
    starter.start()
    try:
        yield f"http://127.0.0.1:{port}/v1", go
    finally:
        go.set()
        starter.join()
        for proc in procs:
            proc.kill()
            proc.wait()


def test_wait_for_server_given_at_submit_holds_on_the_worker(
    pg_url: str, tmp_path: Path, sandbox: Path, late_server: tuple[str, threading.Event]
) -> None:
    url, go = late_server
    with workers(pg_url, tmp_path, 1, {}), PostgresStore(pg_url) as store:

        def taken() -> bool:  # the worker calls at once: it meets the endpoint down
            runs = store.list_runs()
            return bool(runs) and store.executor(runs[0].run_id) is not None

        def start_server_once_taken() -> None:
            wait_until(taken, RUN_S, "the worker to take the run")
            go.set()

        helper = threading.Thread(target=start_server_once_taken, daemon=True)
        helper.start()
        done = _run(url, sandbox, pg_url, "--model", "plan", "--wait-for-server", "50")
        helper.join()
    report = _report(done)
    assert report["status"] == "completed", report


async def test_the_workers_provider_is_built_from_the_runs_recipe(
    store: PostgresStore, ledger: PostgresLedger, sandbox: Path
) -> None:
    """Every provider option of the recipe, on the provider the worker builds
    for the run (its spans' ``gen_ai.provider.name`` is the provider's name)."""
    recipe = Recipe(
        directory=str(sandbox),
        base_url="http://127.0.0.1:9/v1",
        model="plan",
        request_timeout=7.5,
        recover_tool_calls=True,
        provider_name="acme",
        wait_for_server_s=12.0,
        margin_ratio=0.25,
        price_in=3.0,
    )
    root = new_state(recipe.agent(Limits()), "task", Limits(), metadata=recipe.metadata())
    worker = Worker(database=store.path, executor_id="w1")
    worker._store, worker._ledger, worker._queue = store, ledger, object()  # type: ignore[assignment]
    runner, _ = worker._rebuild(root)
    async with recipe.provider() as embedded:
        built = runner.provider
        assert isinstance(built, type(embedded))
        assert (built.provider_name, built.base_url) == ("acme", embedded.base_url)
        assert built._endpoint._timeout == embedded._endpoint._timeout
        assert built._endpoint._timeout["read"] == 7.5
        assert built._recover is embedded._recover is True
    calls = recipe.model_calls()
    assert runner.retry == calls.retry and runner.retry.wait_for_server_s == 12.0
    assert runner.prompt_margin == calls.margin and runner.prompt_margin.ratio == 0.25
    assert runner.prices == calls.prices
    for provider in worker._providers.values():
        await provider.aclose()
