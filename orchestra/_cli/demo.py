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
from .options import SECONDS, TURNS
from .stores import must_exist

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


def _sandbox(directory: str | None) -> Path:
    import tempfile

    from .._scripted import make_sandbox

    if directory is None:
        return make_sandbox(tempfile.mkdtemp(prefix="orchestra-demo-"))
    path = Path(directory)
    return path if path.is_dir() and any(path.iterdir()) else make_sandbox(path)


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
    "[default: a new temporary directory]",
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

    if continue_from is not None:  # a run to continue is in a store that exists
        must_exist(reporting.store_path)  # refused before anything is made
    recipe = start.recipe(
        tree,
        reporting,
        directory=str(_sandbox(directory)),
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
    session, spans = start.session(recipe, reporting, cancel_after=cancel_after)
    task = demo_task(scenario, children) if continue_from is None else message or FOLLOW_UP
    start.start(session, start.limits(max_turns, tree), task, reporting, spans, continue_from)
