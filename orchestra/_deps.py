"""Dependencies: what the application hands a run's tools, never saved with it.

A tool often needs the application's own resources: a database pool, an HTTP
client, the user it acts for. A run is given them as one value, its
*dependencies* (``Runner.run(agent, task, deps=...)``); its tools read them as
``ctx.deps`` (:class:`~orchestra.ToolContext`), its instructions, when they
are a function, as ``ctx.deps`` of a :class:`RunContext`. Children get their
parent's unless the tool that starts them gives others
(``ctx.run_child(agent, task, deps=...)``).

Dependencies are live objects (a pool is not data), so they are never saved:
a run that is resumed, here or in another process, is given them again
(``Runner.resume(run_id, agent, deps=...)``). An agent that declares
``deps_type`` refuses to start or resume without a value of that type, in one
line. On workers, a root submitted with ``deps="module:attribute"`` (a value,
or a function returning one) has them made by each worker that executes a run
of its tree: the reference is saved, the value never is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic

import attrs

from ._exceptions import ConfigError
from ._reference import named
from ._state import Limits

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    DepsT = TypeVar("DepsT", default=Any)
else:  # typing's TypeVar takes a default from Python 3.13; only type checkers use it
    from typing import TypeVar

    DepsT = TypeVar("DepsT")

__all__ = ["DEPS_KEY", "DepsT", "RunContext", "check_deps", "deps_of_reference"]

DEPS_KEY = "orchestra.deps"
"""The metadata key of a submitted root's dependencies, as ``module:attribute``."""


@attrs.frozen(kw_only=True)
class RunContext(Generic[DepsT]):
    """What an agent's instructions see when they are a function, as a run starts.

    They are called once per run, when it is made (a child: once its limits
    are carved), and what they return is saved as the run's system message,
    so a resumed run reads exactly what it read before.

    Attributes:
        deps: the run's dependencies (None if it was given none).
        run_id: the run's id.
        agent: its agent's name.
        task: what it is asked.
        depth: 0 for a root, 1 for its children, and so on.
        limits: its limits (a child's: as carved from its parent's).
        tree_spent_usd: what its tree had spent when it started.
    """

    deps: DepsT
    run_id: str
    agent: str
    task: str
    depth: int
    limits: Limits
    tree_spent_usd: float = 0.0


def check_deps(agent: str, deps_type: type[Any] | None, deps: object, doing: str) -> None:
    """Refuse ``deps`` for a run of ``agent`` (``doing``: "start", "resume") if its
    agent declares ``deps_type`` and they are missing or of another type.

    Raises:
        ConfigError: one line saying what is missing.
    """
    if deps_type is None:
        return
    named = getattr(deps_type, "__qualname__", repr(deps_type))
    if deps is None:
        raise ConfigError(
            f"agent {agent!r} needs its dependencies ({named}) to {doing}: pass deps=... "
            "(they are never saved with a run)"
        )
    if isinstance(deps_type, type) and not isinstance(deps, deps_type):
        raise ConfigError(
            f"agent {agent!r} needs dependencies of type {named}, got {type(deps).__name__}"
        )


def deps_of_reference(reference: str) -> object:
    """The dependencies ``module:attribute`` names (the value, or what calling it returns).

    Raises:
        ConfigError: it cannot be imported, or making them failed.
    """
    found = named(reference, "dependencies")
    if not callable(found):
        return found
    try:
        return found()
    except Exception as exc:
        raise ConfigError(f"making dependencies {reference!r} failed: {exc}") from exc
