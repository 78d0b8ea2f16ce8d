"""Shared fixtures: a sandbox directory and runners on the in-process scripted provider."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestra import (
    Agent,
    Event,
    Limits,
    MemoryStore,
    OpenAIProvider,
    Runner,
    SQLiteStore,
    ToolPolicy,
)
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._stores.contract import DurableStore, Store
from orchestra.testing import ScriptedTransport, make_sandbox


@pytest.fixture(autouse=True)
def private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own SQLite store: the CLI never touches the user's."""
    path = tmp_path / "store" / "runs.db"
    monkeypatch.setenv("ORCHESTRA_STORE", str(path))
    return path


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "sandbox")


@pytest.fixture
async def provider() -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(
        base_url="http://scripted.test/v1", api_key="k", transport=ScriptedTransport()
    )
    yield p
    await p.aclose()


@pytest.fixture
def events() -> list[Event]:
    return []


@pytest.fixture
def runner(provider: OpenAIProvider, events: list[Event]) -> Runner:
    return Runner(provider=provider, sink=events.append)


@pytest.fixture
def scenario_agent(sandbox: Path) -> Callable[..., Agent]:
    def make(
        name: str,
        *,
        limits: Limits | None = None,
        child_limits: Limits | None = None,
        policy: ToolPolicy | None = None,
    ) -> Agent:
        return demo_agent(
            name,
            sandbox,
            limits=limits or Limits(max_turns=20),
            child_limits=child_limits or Limits(max_turns=8, max_budget_usd=0.05),
            policy=policy or ToolPolicy(),
        )

    return make


@pytest.fixture
def run_scenario(runner: Runner, scenario_agent: Callable[..., Agent]) -> Callable[..., Any]:
    async def go(name: str, **options: Any) -> Any:
        return await runner.run(scenario_agent(name, **options), demo_task(name))

    return go


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """The base URL of ``orchestra serve-scripted`` on a free port, in its own process."""
    command = [sys.executable, "-m", "orchestra", "serve-scripted", "--port", "0"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    line = server.stderr.readline()
    drain = threading.Thread(target=server.stderr.read, daemon=True)  # never let it block
    drain.start()
    try:
        assert "http://" in line, line
        yield line[line.index("http://") :].strip()
    finally:
        server.kill()
        server.wait()
        drain.join()
        server.stderr.close()


# -- a PostgreSQL server: $ORCHESTRA_PG_URL (CI starts one), else a throwaway cluster --------
# (tools/postgres.py, in a temporary directory for the session; skips without PostgreSQL)

PG_TOOL = Path(__file__).resolve().parents[1] / "tools" / "postgres.py"
NO_BINARIES = 4  # tools/postgres.py's exit code when PostgreSQL is not installed


def pg_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PG_TOOL), *args], capture_output=True, text=True, timeout=180
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[tuple[str, str | None]]:
    """A PostgreSQL server's URL (its superuser may create databases), and the
    directory ``tools/postgres.py`` keeps it in (None: given by URL alone)."""
    given = os.environ.get("ORCHESTRA_PG_URL")
    if given:
        yield given, os.environ.get("ORCHESTRA_PG_STATE")
        return
    # Not under pytest's tmp_path: its parents are closed to the postgres user.
    state = tempfile.mkdtemp(prefix="orchestra-test-pg.")
    try:
        started = pg_tool("start", "--dir", state)
        if started.returncode == NO_BINARIES:
            pytest.skip(f"no PostgreSQL (set ORCHESTRA_PG_URL): {started.stderr.strip()}")
        assert started.returncode == 0, started.stderr
        yield started.stdout.strip(), state
    finally:
        pg_tool("stop", "--dir", state)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server_url(pg_server: tuple[str, str | None]) -> str:
    """A PostgreSQL server's URL (its superuser may create databases)."""
    return pg_server[0]


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """The URL of a database of its own, created for the test and dropped after it
    (with DBOS's beside it, if the test made one: nothing is left for later tests)."""
    name = f"orchestra_test_{uuid.uuid4().hex[:16]}"
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(pg_server_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            for db in (name, f"{name}_dbos"):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


# -- every kind of store (the contract tests, the decisions) ----------------------------

STORE_KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def pg_database(pg_url: str) -> str:
    """A database of its own for a contract test (see ``pg_url``)."""
    return pg_url


def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of ``kind`` (``postgres``: on a database of its own)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "runs.db")
    from orchestra.distributed import PostgresStore

    return PostgresStore(request.getfixturevalue("pg_database"))


@pytest.fixture(params=STORE_KINDS)
def each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = open_store(request.param, request, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=STORE_KINDS[1:])
def each_durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
    opened = open_store(request.param, request, tmp_path)
    assert opened.inbox is opened and opened.leases is opened
    try:
        yield opened  # type: ignore[misc]  # checked above: it offers both
    finally:
        opened.close()
