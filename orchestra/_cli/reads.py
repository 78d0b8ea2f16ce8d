"""``orchestra runs``, ``show`` and ``trace``: saved runs, read; nothing is created."""

from __future__ import annotations

import json

import click

from .common import json_option
from .options import count
from .stores import existing_store, loaded, store_flag, store_option

__all__ = ["runs", "show", "trace"]


@click.command()
@click.option(
    "--limit", type=count(10_000, low=1), default=20, show_default=True, help="Most runs to list."
)
@click.option("--all", "all_runs", is_flag=True, help="Children too, not just roots.")
@store_option
@json_option
def runs(limit: int, all_runs: bool, store_path: str | None, as_json: bool) -> None:
    """Recent runs: each one's agent, model, status (and what an interrupted one waits
    for) and spend; a conversation's runs together, each marked with the run it continues."""
    states = existing_store(store_path).list_runs(limit=limit, roots_only=not all_runs)
    if not as_json:
        from .._views.printed import print_runs

        print_runs(states)
        return
    click.echo(
        json.dumps(
            [
                {
                    "run_id": s.run_id,
                    "agent": s.agent,
                    "model": s.model,
                    "status": s.status.value,
                    "waits_for": s.interruption.kind.value if s.interruption else None,
                    "turns": s.turns,
                    "cost_usd": s.own.cost_usd,
                    "tree_cost_usd": s.tree.cost_usd,
                    "updated_at": s.updated_at,
                    "parent_id": s.parent_id,
                    "continues": s.continues,
                    "conversation_id": s.conversation,
                }
                for s in states
            ]
        )
    )


@click.command()
@click.argument("run_id")
@store_option
@json_option
def show(run_id: str, store_path: str | None, as_json: bool) -> None:
    """A run's tree with status and costs, and the call it waits on if any."""
    from .._recipes.recipe import Recipe
    from .._views.printed import print_tree, print_waiting
    from .._views.report import report, tree_result

    store, state = loaded(store_path, run_id)
    result = tree_result(store.tree(state.root_id), state.run_id)
    recipe = Recipe.of(state) if state.metadata else None
    if recipe is None:
        out = report(result, store, None, None)
    else:
        out = report(result, store, None, recipe.directory, recipe.base_url)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    print_tree(out)
    print_waiting(out, store_flag(store_path))


@click.command()
@click.argument("run_id")
@store_option
@json_option
def trace(run_id: str, store_path: str | None, as_json: bool) -> None:
    """A run tree's events, in order (JSON lines)."""
    store, state = loaded(store_path, run_id)
    events = (
        store.events(root_id=state.root_id)
        if state.parent_id is None
        else store.events(run_id=state.run_id)
    )
    if as_json:
        click.echo(json.dumps(events))
    else:
        for event in events:
            click.echo(json.dumps(event, sort_keys=False))
