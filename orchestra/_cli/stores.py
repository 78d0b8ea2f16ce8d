"""Which store a command's ``--store`` names, opened for what the command does.

A command that starts a run may create its SQLite file (and folders); a
command that only reads or acts on saved runs (``runs``, ``show``, ``trace``,
``cancel``, ``approve``, ``reject``, ``resume``, ``console`` unless
``--create``) refuses a file that does not exist, naming it, and creates
nothing: a typo is said, not papered over with an empty store.

Without ``--store``, ``$ORCHESTRA_STORE`` names the store, a SQLite file or a
``postgresql://`` URL as ``--store`` takes (:func:`from_environment`); unset,
the file is in the user data directory (``default_store_path``).

A run id may be shortened to any prefix that names one run (``run_75d1410d``,
as ``runs`` and ``show`` print it): every command resolves it with
:meth:`~orchestra._stores.contract.Store.resolve` (:func:`loaded`), which says
in one line when no run or several start with it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .errors import CommandError

if TYPE_CHECKING:
    from .._state import RunState
    from .._stores.contract import DurableStore

__all__ = [
    "existing_store",
    "from_environment",
    "is_distributed",
    "loaded",
    "need_distributed",
    "new_store",
    "store_flag",
    "store_option",
]

DATABASE_SCHEMES = ("postgresql://", "postgres://")
"""How a store value that names a PostgreSQL database (not a SQLite file) begins."""
STORE_VARIABLE = "ORCHESTRA_STORE"


def from_environment(
    _ctx: click.Context | None, _param: click.Parameter | None, value: str | None
) -> str | None:
    """``--store``'s value; without it, a ``postgresql://`` URL ``$ORCHESTRA_STORE``
    names (a file it names is left to ``default_store_path``, which expands ``~``)."""
    if value is not None:
        return value
    named = os.environ.get(STORE_VARIABLE, "")
    return named if named.startswith(DATABASE_SCHEMES) else None


store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    default=None,
    callback=from_environment,
    help="Run store: a SQLite file, or a postgresql:// URL whose runs `orchestra worker`s "
    "execute (default: $ORCHESTRA_STORE, either of these, else a file in the user data "
    "directory).",
)


def new_store(path: str | None) -> DurableStore:
    """The store ``path`` names, created if it is a SQLite file that is missing."""
    from .._stores.sqlite import SQLiteStore

    if is_distributed(path):
        from ..distributed import PostgresStore

        return PostgresStore(str(path))
    return SQLiteStore(path)


def existing_store(path: str | None) -> DurableStore:
    """The store ``path`` names, which must exist: nothing is created.

    Raises:
        CommandError: no SQLite file is at ``path`` (or the default path).
    """
    must_exist(path)
    return new_store(path)


def must_exist(path: str | None, *, or_else: str = "`orchestra demo plan` starts one") -> None:
    """Refuse a SQLite store ``path`` (or the default path) that has no file yet,
    creating nothing (a PostgreSQL store is not checked here); the message ends
    with ``or_else``, what to do instead.

    Raises:
        CommandError: no SQLite file is there.
    """
    if is_distributed(path):
        return
    from .._stores.sqlite import default_store_path

    file = Path(path) if path is not None else default_store_path()
    if not file.is_file():
        raise CommandError(
            f"no run store at {file}: no run was saved there (check --store; {or_else})"
        )


def is_distributed(path: str | None) -> bool:
    """Whether ``--store`` names a PostgreSQL database (runs executed by workers).

    Raises:
        CommandError: it does, and the distributed extra is not installed.
    """
    if path is None or not path.startswith(DATABASE_SCHEMES):
        return False
    need_distributed("a postgresql:// store")
    return True


def need_distributed(what: str) -> None:
    """Refuse ``what`` (``the worker``) unless the distributed extra is installed,
    naming the package that is missing (checked before ``orchestra.distributed``,
    which needs both, is imported).

    Raises:
        CommandError: ``the worker needs the distributed extra (dbos is missing):
            pip install 'orchestra-trees[distributed]'``.
    """
    for package in ("psycopg", "dbos"):
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as exc:
            raise CommandError(
                f"{what} needs the distributed extra ({exc.name or package} is missing): "
                "pip install 'orchestra-trees[distributed]'"
            ) from exc


def loaded(store_path: str | None, run_id: str) -> tuple[DurableStore, RunState]:
    """The (existing) store and the run that a (possibly shortened) id names."""
    store = existing_store(store_path)
    return store, store.load(store.resolve(run_id))


def store_flag(path: str | None) -> str:
    """`` --store PATH`` to repeat in a suggested command, or nothing for the default
    (a database URL from ``$ORCHESTRA_STORE`` is the default too, and not shown)."""
    if not path or (path.startswith(DATABASE_SCHEMES) and path == os.environ.get(STORE_VARIABLE)):
        return ""
    return f" --store {path}"
