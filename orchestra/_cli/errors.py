"""The command line's one error path: a line ``error: …`` on stderr and a
documented exit code (``orchestra --debug …`` shows the traceback instead).

The exit codes are :mod:`orchestra._views.exits`'s.

Exceptions from inside ``trio.run`` come wrapped in exception groups; a group is
unwrapped to the one error it carries (``trio.Cancelled`` aside), as
:mod:`orchestra._cancelled` does for cancellation.

This module is imported by ``orchestra --help``: it imports nothing heavy.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .._exceptions import ConfigError, OrchestraError
from .._views.exits import INTERNAL, INTERRUPTED, OPERATIONAL, USAGE

__all__ = [
    "BadValue",
    "CommandError",
    "InternalError",
    "Interrupted",
    "OrchestraGroup",
    "translated",
]


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
