"""``orchestra demo``: a scenario against the embedded scripted provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

from .._exceptions import OrchestraError
from .common import (
    Reporting,
    TreeOptions,
    child_budget_option,
    child_turns_option,
    continue_option,
    provider_option,
    reporting_options,
    tree_options,
)
from .conversation import Continuation, continuation
from .options import SECONDS, TURNS, chunk_ms_option

__all__ = ["demo"]


class ScenarioType(click.types.StringParamType):
    """A demo scenario, optionally with fault modifiers: ``plan``, ``plan+429x3``."""

    name = "scenario"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SCENARIO[+FAULT[xN]...]"  # the scenarios are listed in the help, one a line

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from .._recipes.demo import parse_scenario

        name = super().convert(value, param, ctx)
        try:
            parse_scenario(name)
        except OrchestraError as exc:
            self.fail(str(exc), param, ctx)
        return name

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        from .._recipes.demo import SCENARIOS

        return [CompletionItem(s) for s in SCENARIOS if s.startswith(incomplete)]


class DemoCommand(click.Command):
    """``orchestra demo``: its help lists each scenario with what it does."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from .._recipes.demo import SCENARIOS
        from .._scripted.scenarios import SCENARIOS as SCRIPTS

        super().format_help_text(ctx, formatter)
        with formatter.section("Scenarios"):
            formatter.write_dl([(name, SCRIPTS[name].description) for name in SCENARIOS])


FOLLOW_UP = "Thanks. What should we do about it?"
"""The demo's next message when it continues a run (``--continue``) without ``--message``."""


def _sandbox(directory: str | None, earlier: Continuation | None) -> Path:
    """``--dir`` (given the demo files if missing or empty), else the conversation's
    (as the earlier run left it), else a new temporary directory with the files;
    a continuation says which on stderr."""
    import tempfile

    from .._scripted import make_sandbox

    kept = earlier.sandbox() if earlier is not None and directory is None else None
    if kept is not None:
        path = Path(kept)
    elif directory is None:
        path = make_sandbox(tempfile.mkdtemp(prefix="orchestra-demo-"))
    else:
        path = Path(directory)
        path = path if path.is_dir() and any(path.iterdir()) else make_sandbox(path)
    if earlier is not None:
        click.echo(f"sandbox: {path} ({earlier.said(str(path))})", err=True)
    return path


@click.command(cls=DemoCommand)
@click.argument("scenario", type=ScenarioType())
@click.option(
    "--max-turns",
    type=TURNS,
    default=None,
    help="Model calls of the root run (each research child has --child-turns). "
    "[default: 20; slow_tree: 3 + 3 per child]",
)
@child_budget_option
@child_turns_option
@click.option(
    "--children",
    type=click.IntRange(1, 100),
    default=None,
    help="slow_tree: how many children. [default: 3]",
)
@click.option(
    "--errors",
    type=click.Choice(["detailed", "generic"]),
    default="detailed",
    show_default=True,
    help="How tool errors are worded for the model.",
)
@click.option("--fatal-errors", is_flag=True, help="Any tool error fails the run.")
@click.option(
    "--cancel-after",
    type=SECONDS,
    default=None,
    metavar="SECONDS",
    help="Press Stop after this many seconds.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Sandbox directory (made, with the demo files, if missing or empty). "
    "[default: a new temporary directory; with --continue, the conversation's if it is "
    "still there]",
)
@chunk_ms_option(
    "Milliseconds the scripted server waits before each chunk of a streamed reply: "
    "watch the tree stream (try 30)."
)
@click.option(
    "--message",
    default=None,
    metavar="TEXT",
    help="With --continue: the next user message [default: a follow-up question].",
)
@provider_option
@tree_options
@reporting_options
@continue_option
def demo(
    scenario: str,
    max_turns: int | None,
    child_budget: float,
    child_turns: int,
    children: int | None,
    errors: str,
    fatal_errors: bool,
    cancel_after: float | None,
    directory: str | None,
    chunk_ms: float,
    message: str | None,
    wire: str | None,
    tree: TreeOptions,
    reporting: Reporting,
    continue_from: str | None,
) -> None:
    """Run SCENARIO against the embedded scripted provider.

    SCENARIO may add faults, SCENARIO+FAULT[xN]...: an HTTP status (429, 500,
    401, ...), hang, garbage, truncated, reset, nousage or promptPCT; the first
    N requests (default 1) meet each. `orchestra resume` plays no faults.
    """
    from .._recipes.demo import demo_task, parse_scenario
    from . import start

    earlier = continuation(reporting.store_path, continue_from)  # before anything is made
    recipe = start.recipe(
        tree,
        reporting,
        directory=str(_sandbox(directory, earlier)),
        scenario=scenario,
        errors=errors,
        fatal_errors=fatal_errors,
        child_budget=child_budget,
        child_turns=child_turns,
        wire=wire or "chat",
    )
    if max_turns is None:
        slow_tree = parse_scenario(scenario)[0] == "slow_tree"
        max_turns = 3 + 3 * (children or 3) if slow_tree else 20
    store = earlier.store if earlier else None
    session, spans = start.session(
        recipe, reporting, store=store, cancel_after=cancel_after, chunk_s=chunk_ms / 1000
    )
    task = demo_task(scenario, children) if earlier is None else message or FOLLOW_UP
    limits = start.limits(max_turns, tree)
    start.start(session, limits, task, reporting, spans, earlier.run_id if earlier else None)
