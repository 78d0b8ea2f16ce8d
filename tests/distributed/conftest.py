"""Fixtures of the distributed tests: a PostgreSQL server, and a fresh database per test.

The server is ``$ORCHESTRA_PG_URL`` if set (CI starts one), else a throwaway
cluster that ``tools/postgres.py`` starts in a temporary directory for the
session (and stops after it); without PostgreSQL's binaries the tests skip.
Every test here is marked ``postgres``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from orchestra.distributed import PostgresLedger, PostgresStore
from orchestra.testing import make_sandbox

HERE = Path(__file__).resolve().parent
TOOL = HERE.parents[1] / "tools" / "postgres.py"
NO_BINARIES = 4  # tools/postgres.py's exit code when PostgreSQL is not installed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this directory ``postgres`` (the hook sees the whole session)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.postgres)


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=180
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
        started = tool("start", "--dir", state)
        if started.returncode == NO_BINARIES:
            pytest.skip(f"no PostgreSQL (set ORCHESTRA_PG_URL): {started.stderr.strip()}")
        assert started.returncode == 0, started.stderr
        yield started.stdout.strip(), state
    finally:
        tool("stop", "--dir", state)
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
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(pg_server_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            for db in (name, f"{name}_dbos"):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    """A store on the test's own database, closed after the test."""
    with PostgresStore(pg_url) as opened:
        yield opened


@pytest.fixture
def ledger(store: PostgresStore) -> PostgresLedger:
    """The budget ledger on ``store``'s database, its tables made (executor ``w1``)."""
    made = PostgresLedger(store=store, executor="w1")
    made.create()
    return made


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A directory holding the scripted provider's sandbox files."""
    return make_sandbox(tmp_path / "sandbox")
