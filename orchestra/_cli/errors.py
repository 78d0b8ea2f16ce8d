"""The command line's one error path: a line ``error: …`` on stderr and a
documented exit code (``orchestra --debug …`` shows the traceback instead).

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      the run tree completed (and every command that did its job)
1      the run failed
2      usage: a bad option or argument, a value out of range
3      the run stopped at its turn limit (``max_turns_exceeded``)
4      the run stopped at its budget (``budget_exceeded``)
5      the run stopped at its deadline (``deadline_exceeded``)
6      the run was interrupted: cancelled, waits for a human, provider unavailable
8      operational: no such run, a run that cannot be resumed or decided, another
       process holds the run, the store or a file cannot be read or written, a
       server cannot listen
9      internal error: a bug in Orchestra (``--debug`` shows where)
130    interrupted (Ctrl-C) before a run tree was started
=====  ==========================================================================

A run is never reported ``running``: ``demo``, ``run`` and ``resume`` return once
the tree has stopped, so no code stands for it.

Exceptions from inside ``trio.run`` come wrapped in exception groups; a group is
unwrapped to the one error it carries (``trio.Cancelled`` aside), as
:mod:`orchestra._cancelled` does for cancellation.

This module is imported by ``orchestra --help``: it imports nothing heavy.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

import click

from .._exceptions import ConfigError, OrchestraError
from .._state import Status

__all__ = [
    "INTERNAL",
    "INTERRUPTED",
    "OPERATIONAL",
    "USAGE",
    "BadValue",
    "CommandError",
    "InternalError",
    "Interrupted",
    "OrchestraGroup",
    "status_exit",
    "translated",
]

USAGE: Final = 2
OPERATIONAL: Final = 8
INTERNAL: Final = 9
INTERRUPTED: Final = 130

_STATUS_EXIT: Final[Mapping[Status, int]] = {
    Status.COMPLETED: 0,
    Status.FAILED: 1,
    Status.MAX_TURNS_EXCEEDED: 3,
    Status.BUDGET_EXCEEDED: 4,
    Status.DEADLINE_EXCEEDED: 5,
    Status.INTERRUPTED: 6,
}


def status_exit(status: Status) -> int:
    """The exit code of a command that ran a tree until it stopped with ``status``.

    Raises:
        ValueError: ``status`` is ``running`` (a tree is reported once stopped).
    """
    try:
        return _STATUS_EXIT[status]
    except KeyError:
        raise ValueError(f"a run tree is reported once stopped, not {status.value}") from None


class CommandError(click.ClickException):
    """An operational failure, said in one line (exit code :data:`OPERATIONAL`)."""

    exit_code = OPERATIONAL


class BadValue(CommandError):
    """A value the user gave that Orchestra refused (a :class:`ConfigError`)."""

    exit_code = USAGE


class InternalError(CommandError):
    """A bug: an exception Orchestra did not mean to raise."""

    exit_code = INTERNAL


class Interrupted(CommandError):
    """Ctrl-C before a run tree was started (once started, the tree stops and is saved)."""

    exit_code = INTERRUPTED


class OrchestraGroup(click.Group):
    """The ``orchestra`` group: every failure below it ends as one line.

    Its callback must take a ``debug`` flag: with it, errors propagate with
    their traceback.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except BrokenPipeError:
            raise  # click's main exits quietly when stdout's reader went away
        except BaseException as exc:
            if ctx.params.get("debug"):
                raise
            raise translated(exc) from exc

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's ``main``; standalone, every click error is one line ``error: …``."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `orchestra` alone: the help
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {_one_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


def _one_line(exc: click.ClickException) -> str:
    message = " ".join(exc.format_message().split())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        message = message if message.endswith(".") else message + "."
        message += f" Try '{exc.ctx.command_path} --help'."
    return message


def translated(exc: BaseException) -> click.ClickException:
    """What the user is told about ``exc``: a click error to show in one line."""
    leaf = _the_error(exc)
    if isinstance(leaf, click.ClickException):
        return leaf
    if isinstance(leaf, KeyboardInterrupt):
        return Interrupted("interrupted")
    if isinstance(leaf, ConfigError):
        return BadValue(str(leaf))
    if isinstance(leaf, OrchestraError):
        return CommandError(str(leaf))
    if isinstance(leaf, OSError):
        return CommandError(_os_message(leaf))
    return InternalError(f"internal error: {leaf!r} (run again with --debug for the traceback)")


def _the_error(exc: BaseException) -> BaseException:
    """The error a (nested) exception group stands for: its one leaf that is not a
    cancellation, else its first error we know how to say, else the group."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    from .._cancelled import leaves as all_leaves  # a group came from trio: it is loaded

    leaves = [leaf for leaf in all_leaves(exc) if not _is_cancelled(leaf)]
    if len(leaves) == 1:
        return leaves[0]
    known = (click.ClickException, KeyboardInterrupt, OrchestraError, OSError)
    return next((leaf for leaf in leaves if isinstance(leaf, known)), exc)


def _is_cancelled(exc: BaseException) -> bool:
    trio = sys.modules.get("trio")  # a group from trio means trio is loaded
    return trio is not None and isinstance(exc, trio.Cancelled)


def _os_message(exc: OSError) -> str:
    """``/x/run.jsonl: No such file or directory`` rather than errno noise."""
    if exc.filename is None or exc.strerror is None:
        return str(exc)
    return f"{exc.filename}: {exc.strerror}"
