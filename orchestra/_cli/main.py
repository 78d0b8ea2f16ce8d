"""The ``orchestra`` group and the console script's entry point.

Every command takes ``--store PATH`` (default: ``$ORCHESTRA_STORE`` or the
user data directory), so a run started in one process can be shown, approved,
cancelled and resumed from another. Each command lives in its own module of
this package; modules that run trees (trio, the runner, the tokenizer,
OpenTelemetry, the demo's tools) are imported inside the commands that need
them: ``--help``, ``runs``, ``show`` and ``cancel`` start without them
(tests/test_startup.py).
"""

from __future__ import annotations

import click

from .._version import DISTRIBUTION
from .cancel import cancel
from .decide import approve, grant, reject
from .demo import demo
from .errors import OrchestraGroup
from .prices import prices_command
from .reads import runs, show, trace
from .resume import resume
from .run_task import run_command
from .serve import console_command, mcp_group, serve_scripted_command, worker_command

__all__ = ["main", "run"]


@click.group(cls=OrchestraGroup)
@click.version_option(package_name=DISTRIBUTION, message="%(prog)s %(version)s")
@click.option(
    "--debug",
    is_flag=True,
    envvar="ORCHESTRA_DEBUG",
    show_envvar=True,
    help="On an error, show its Python traceback instead of one line; the command "
    "then exits 1, not with the error's usual code (8, 9, or 2 for a value refused "
    "after the options were read).",
)
def main(debug: bool) -> None:
    """Orchestra: LLM agents as governed trees.

    An error is one line `error: ...` on stderr. Exit codes:

    \b
      0  completed            4  budget_exceeded      8  operational error:
      1  failed               5  deadline_exceeded       store, lease, no such
      2  usage error          6  interrupted             run, cannot resume
      3  max_turns_exceeded                           9  internal error (a bug)
    """
    # `debug` is read from the context by OrchestraGroup.invoke, around every command.


for _command in (
    demo,
    run_command,
    resume,
    approve,
    reject,
    grant,
    cancel,
    runs,
    show,
    trace,
    prices_command,
    console_command,
    worker_command,
    mcp_group,
    serve_scripted_command,
):
    main.add_command(_command)


def run() -> None:
    """Entry point: every error becomes one line ``error: …`` and its exit code
    (see :mod:`orchestra._cli.errors`)."""
    main(prog_name="orchestra")
