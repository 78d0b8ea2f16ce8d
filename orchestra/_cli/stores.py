"""Which store a command's ``--store`` names, opened for what the command does.

A command that starts a run may create its SQLite file (and folders); a
command that only reads or acts on saved runs (``runs``, ``show``, ``trace``,
``cancel``, ``approve``, ``reject``, ``resume``, ``console`` unless
``--create``) refuses a file that does not exist, naming it, and creates
nothing: a typo is said, not papered over with an empty store.

A run id may be shortened to any prefix that names one run (``run_75d1410d``,
as ``runs`` and ``show`` print it): every command resolves it with
:meth:`~orchestra._stores.contract.Store.resolve` (:func:`loaded`), which says
in one line when no run or several start with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .errors import CommandError

if TYPE_CHECKING:
    from .._state import RunState
    from .._stores.contract import DurableStore

__all__ = [
    "existing_store",
    "is_distributed",
    "loaded",
    "new_store",
    "store_flag",
    "store_option",
]

store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Run store: a SQLite file (default: $ORCHESTRA_STORE or the user data "
    "directory), or a postgresql:// URL whose runs `orchestra worker`s execute.",
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
    """Whether ``--store`` names a PostgreSQL database (runs executed by workers)."""
    if path is None or not path.startswith(("postgresql://", "postgres://")):
        return False
    from ..distributed._cli import missing

    problem = missing()
    if problem is not None:
        raise CommandError(f"a postgresql:// store needs {problem}")
    return True


def loaded(store_path: str | None, run_id: str) -> tuple[DurableStore, RunState]:
    """The (existing) store and the run that a (possibly shortened) id names."""
    store = existing_store(store_path)
    return store, store.load(store.resolve(run_id))


def store_flag(path: str | None) -> str:
    """`` --store PATH`` to repeat in a suggested command, or nothing for the default."""
    return f" --store {path}" if path else ""
