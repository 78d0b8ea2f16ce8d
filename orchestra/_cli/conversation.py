"""``demo|run --continue RUN_ID``: the run a new message continues, and where.

The run is named as every command names one: its id or a unique prefix of it
(``run_75d1410d``, as ``runs`` and ``show`` print it). It is looked up before
anything is made, in a store that must exist.

A conversation keeps its sandbox: a continuation given no ``--dir`` works in
the directory its earlier run worked in, if that is still there (else in a new
one, as a first run would). Which directory it uses is said in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .._exceptions import StateError
from .errors import BadValue
from .stores import is_distributed, loaded

if TYPE_CHECKING:
    from .._state import RunState
    from .._stores.contract import DurableStore

__all__ = ["Continuation", "continuation"]


@attrs.frozen
class Continuation:
    """The stopped run a new message continues, and the store it is in."""

    store: DurableStore
    earlier: RunState

    @property
    def run_id(self) -> str:
        """The earlier run's whole id (the command may have given a prefix)."""
        return self.earlier.run_id

    def saved_sandbox(self) -> str | None:
        """The directory the earlier run worked in, if the CLI saved one with it."""
        from .._recipes.recipe import Recipe

        try:
            return Recipe.of(self.earlier).directory
        except StateError:  # not started by the CLI: nothing saved
            return None

    def sandbox(self) -> str | None:
        """The earlier run's directory, if it is still there: the continuation's."""
        saved = self.saved_sandbox()
        return saved if saved is not None and Path(saved).is_dir() else None

    def said(self, directory: str) -> str:
        """How ``directory``, the continuation's sandbox, relates to the earlier run's:
        ``as in run_75d1410d``, ``run_75d1410d's /tmp/x is gone``, ..."""
        from .._views.text import short_id

        run, saved = short_id(self.run_id), self.saved_sandbox()
        if saved is None:
            return f"{run} saved none"
        if Path(saved).resolve() == Path(directory).resolve():
            return f"as in {run}"
        if not Path(saved).is_dir():
            return f"{run}'s {saved} is gone"
        return f"--dir; {run}'s was {saved}"


def continuation(store_path: str | None, run_id: str | None) -> Continuation | None:
    """The run ``--continue RUN_ID`` names (None without ``--continue``).

    Raises:
        BadValue: the store is PostgreSQL (its workers continue no runs yet).
        CommandError: no store at ``store_path``: nothing is created.
        RunNotFound: no run id starts with ``run_id``.
        StateError: several do.
    """
    if run_id is None:
        return None
    if is_distributed(store_path):
        raise BadValue(
            "--continue runs here: a PostgreSQL store's workers do not continue runs yet"
        )
    store, earlier = loaded(store_path, run_id)
    return Continuation(store=store, earlier=earlier)
