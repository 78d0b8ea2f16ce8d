"""``orchestra resume``: continue a stopped tree, here or on the workers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs
import click

from .._state import Limits, RunState
from .common import (
    Reporting,
    max_budget_option,
    reporting_options,
    saved_run_key_option,
    timeout_option,
    tokens_option,
)
from .errors import CommandError
from .options import TURNS
from .stores import is_distributed, loaded, store_flag

if TYPE_CHECKING:
    from .._result import RunResult
    from .._runner import Runner
    from .._stores.contract import DurableStore
    from .._tools import Tool

__all__ = ["resume", "resume_here"]


@click.command()
@click.argument("run_id")
@click.option("--max-turns", type=TURNS, default=None, help="Raise the turn limit.")
@max_budget_option("Raise the budget (USD, whole tree).")
@timeout_option("A new deadline: seconds from now.")
@tokens_option
@saved_run_key_option
@reporting_options
def resume(
    run_id: str,
    max_turns: int | None,
    max_budget: float | None,
    timeout: float | None,
    max_tokens_total: int | None,
    api_key: str,
    reporting: Reporting,
) -> None:
    """Continue a stopped run (after an approval, a cancel, a crash or a raised limit)."""
    store, state = loaded(reporting.store_path, run_id)
    raises = (max_turns, max_budget, timeout, max_tokens_total)
    if is_distributed(reporting.store_path):
        _requeue(reporting, state, raises)
        return
    if state.parent_id is not None:
        raise CommandError(
            f"run {state.run_id} is a child run; resume its tree from the root: "
            f"orchestra resume {state.root_id}{store_flag(reporting.store_path)}"
        )
    resume_here(store, state, reporting, api_key, _raised(state.limits, *raises))


def resume_here(
    store: DurableStore,
    state: RunState,
    reporting: Reporting,
    api_key: str = "",
    raised: Limits | None = None,
) -> None:
    """Continue the stopped tree whose root is ``state`` in this process (its limits
    ``raised``, if given), report it as ``reporting`` says and exit with its status."""
    from .._model.tokens import encoding
    from .._recipes.recipe import Recipe
    from . import start

    recipe = Recipe.of(state)
    if reporting.provider_name is not None:
        recipe = attrs.evolve(recipe, provider_name=reporting.provider_name)
    session, spans = start.session(recipe, reporting, store=store, api_key=api_key)
    encoding()

    async def go(runner: Runner, mcp_tools: tuple[Tool, ...]) -> RunResult:
        return await runner.resume(
            state.run_id,
            recipe.agent(state.limits, mcp_tools),
            limits=raised,
            note="raised from the command line" if raised else "",
        )

    result, elapsed = start.drive(session, state.run_id, go)
    start.finish(result, session, elapsed, reporting, spans)


def _requeue(reporting: Reporting, state: RunState, raises: tuple[Any, ...]) -> None:
    """Resume a tree the workers execute: queue its root again."""
    from ..distributed._cli import requeue

    if any(value is not None for value in raises):
        raise CommandError("raising limits of a run the workers execute is not supported yet")
    assert reporting.store_path is not None
    workflow = requeue(reporting.store_path, state.root_id)
    if reporting.as_json:
        click.echo(json.dumps({"run_id": state.root_id, "queued": workflow}))
    else:
        click.echo(f"queued {state.root_id} (workflow {workflow}): the workers continue it")


def _raised(
    limits: Limits,
    max_turns: int | None,
    max_budget: float | None,
    timeout: float | None,
    max_tokens_total: int | None,
) -> Limits | None:
    """The limits a resume raises to, or None if none was given."""
    if (max_turns, max_budget, timeout, max_tokens_total) == (None, None, None, None):
        return None
    return Limits(
        max_turns=limits.max_turns if max_turns is None else max_turns,
        max_budget_usd=limits.max_budget_usd if max_budget is None else max_budget,
        timeout_s=timeout,
        deadline=limits.deadline if timeout is None else None,
        max_tokens_total=limits.max_tokens_total if max_tokens_total is None else max_tokens_total,
    )
