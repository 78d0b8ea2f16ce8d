"""Fixtures of the distributed tests: a store and a ledger on a fresh database.

The server and the database per test are the root conftest's (``pg_server``,
``pg_url``). Every test here is marked ``postgres``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestra.distributed import PostgresLedger, PostgresStore
from orchestra.testing import make_sandbox

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this directory ``postgres`` (the hook sees the whole session)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.postgres)


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
