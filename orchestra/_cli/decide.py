"""``orchestra approve``, ``reject`` and ``grant``: decide what a run waits on
(a call to approve, or a request for more budget: ``on_limit="ask"``), and with
``--resume`` go on with the tree at once, as ``orchestra resume`` would."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

import click

from .common import Reporting, json_option, saved_run_key_option
from .stores import existing_store, is_distributed, store_flag, store_option

if TYPE_CHECKING:
    from .._state import RunState
    from .._stores.contract import DurableStore

__all__ = ["approve", "grant", "reject"]


_DONE = {"approve": "approved call", "reject": "rejected call", "grant": "granted request"}

resume_option = click.option(
    "--resume",
    "and_resume",
    is_flag=True,
    help="Then resume the tree here at once, as `orchestra resume` does: decide and "
    "continue in one step.",
)


def _decision(fn: Callable[..., dict[str, Any]]) -> Callable[..., None]:
    """A command that decides with ``fn`` and says what it decided and what comes
    next, or (``--resume``) goes on with the tree."""

    @wraps(fn)
    def wrapper(
        run_id: str,
        store_path: str | None,
        as_json: bool,
        and_resume: bool,
        api_key: str,
        **kw: Any,
    ) -> None:
        store = existing_store(store_path)
        root = store.resolve(run_id)
        here = and_resume and not is_distributed(store_path)
        tree = _resumable(store, root) if here else None  # checked before deciding
        waiting = fn(store, root, **kw)
        if waiting["kind"] == "budget_request":
            given = {k: v for k, v in kw.items() if v and k != "call_id"}
            waiting = {**waiting, "tool": "more budget", "arguments": given}
        if is_distributed(store_path):  # the workers go on with it: --resume is implied
            _queued(fn.__name__, store_path, root, waiting, as_json)
        elif tree is not None:
            from .resume import resume_here

            click.echo(_said(fn.__name__, waiting), err=as_json)  # stdout: the tree's report
            resume_here(store, tree, Reporting.plain(store_path, as_json), api_key)
        elif as_json:
            call = json.loads(json.dumps(waiting, default=str))
            click.echo(json.dumps({"run_id": root, "decided": fn.__name__, "call": call}))
        else:
            click.echo(_said(fn.__name__, waiting))
            click.echo(f"next: orchestra resume {root}{store_flag(store_path)}")

    keyed = saved_run_key_option(wrapper, said="With --resume: the key for the tree's endpoint")
    return resume_option(keyed)


def _resumable(store: DurableStore, run_id: str) -> RunState:
    """The root of ``run_id``'s tree, which this process can resume.

    Raises:
        StateError: the tree was not started by the CLI (nothing saved to rebuild
            its agent from).
    """
    from .._recipes.recipe import Recipe

    root = store.load(store.load(run_id).root_id)
    Recipe.of(root)
    return root


def _said(decided: str, waiting: dict[str, Any]) -> str:
    """``approve: delete_file {"path": "x"} (call c1 in run run_…)``."""
    return (
        f"{decided}: {waiting['tool']} {json.dumps(waiting['arguments'])} "
        f"(call {waiting['call_id']} in run {waiting['run_id']})"
    )


def _queued(
    decided: str, store_path: str | None, root: str, waiting: dict[str, Any], as_json: bool
) -> None:
    """Queue the tree again for the workers of a PostgreSQL store, and say so."""
    from ..distributed._cli import requeue

    assert store_path is not None
    queued = requeue(store_path, root)
    click.echo(
        json.dumps({"run_id": root, "decided": decided, "queued": queued})
        if as_json
        else f"{_DONE[decided]} {waiting['call_id']} in run {waiting['run_id']}; "
        f"queued {queued}: the workers continue it"
    )


@click.command()
@click.argument("run_id")
@click.argument("call_id", required=False)
@store_option
@json_option
@_decision
def approve(store: DurableStore, run_id: str, call_id: str | None = None) -> dict[str, Any]:
    """Approve the call RUN_ID waits on (bound to its exact arguments)."""
    from .._approval import approve as decide

    return dict(decide(store, run_id, call_id).to_dict())


@click.command()
@click.argument("run_id")
@click.argument("call_id", required=False)
@click.option("--reason", default="", help="Written into the transcript as the call's result.")
@store_option
@json_option
@_decision
def reject(
    store: DurableStore, run_id: str, call_id: str | None = None, reason: str = ""
) -> dict[str, Any]:
    """Reject the call RUN_ID waits on; the model is told why."""
    from .._approval import reject as decide

    return dict(decide(store, run_id, call_id, reason).to_dict())


@click.command()
@click.argument("run_id")
@click.option("--usd", type=click.FloatRange(0, 1e6), default=0.0, help="USD added to its budget.")
@click.option("--turns", type=click.IntRange(0, 10**6), default=0, help="Turns added.")
@click.option("--tokens", type=click.IntRange(0, 10**12), default=0, help="Tokens added.")
@store_option
@json_option
@_decision
def grant(
    store: DurableStore, run_id: str, usd: float = 0.0, turns: int = 0, tokens: int = 0
) -> dict[str, Any]:
    """Grant the request for more RUN_ID's tree waits on (a limit that asks).

    A child's grant is carved from what its ancestors have left (refused, with
    why, when one has not enough); a root's comes from you. The same grant
    twice applies once. Then resume the tree (on workers: queued at once)."""
    from .._approval import grant as decide
    from .._top_ups import TopUp

    return dict(decide(store, run_id, TopUp(usd=usd, turns=turns, tokens=tokens)).to_dict())
