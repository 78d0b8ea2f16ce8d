"""``$ORCHESTRA_STORE`` names a PostgreSQL store as ``--store`` does (never a file
called ``postgresql:``), and a missing distributed extra is said plainly, with
what to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from orchestra._cli.main import main
from orchestra._cli.stores import from_environment, store_flag

OPERATIONAL = 8
URL = "postgresql://someone:secret@127.0.0.1:1/runs"
"""Nothing listens on port 1: connecting fails at once."""
INSTALL = "pip install 'orchestra-trees[distributed]'"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, where a file named after the URL would appear."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def fails(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == OPERATIONAL, (result.output, result.exception)
    return result


def test_a_database_url_in_the_variable_is_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRA_STORE", URL)
    assert from_environment(None, None, None) == URL
    assert from_environment(None, None, "here.db") == "here.db"  # --store wins
    monkeypatch.setenv("ORCHESTRA_STORE", "~/runs.db")
    assert from_environment(None, None, None) is None  # a file: default_store_path's


@pytest.mark.parametrize("command", [["demo", "plan"], ["runs"]])
def test_a_command_uses_the_database_the_variable_names(
    command: list[str], workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRA_STORE", URL)
    said = fails(*command).stderr
    assert "cannot reach PostgreSQL at 127.0.0.1:1/runs" in said  # the database, tried
    assert "secret" not in said
    assert list(workdir.iterdir()) == []  # no SQLite file ./postgresql:/…


def test_without_the_extra_a_database_url_in_the_variable_is_refused(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRA_STORE", URL)
    monkeypatch.setitem(sys.modules, "dbos", None)  # as if not installed
    said = fails("demo", "plan").stderr
    assert said == (
        f"error: a postgresql:// store needs the distributed extra (dbos is missing): {INSTALL}\n"
    )
    assert list(workdir.iterdir()) == []


def test_suggested_commands_leave_out_the_url_the_variable_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORCHESTRA_STORE", URL)
    assert store_flag(URL) == ""  # the default already: its password is not repeated
    other = "postgresql://127.0.0.1:1/other"
    assert store_flag(other) == f" --store {other}"


@pytest.mark.parametrize("package", ["dbos", "psycopg"])
def test_the_worker_without_the_extra_says_what_to_install(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, package, None)
    said = fails("worker", "--store", URL).stderr
    assert said == (
        f"error: the worker needs the distributed extra ({package} is missing): {INSTALL}\n"
    )
