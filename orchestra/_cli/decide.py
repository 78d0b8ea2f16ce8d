"""``orchestra approve``, ``reject`` and ``grant``: decide what a run waits on
(a call to approve, or a request for more budget: ``on_limit="ask"``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

import click

from .common import json_option
from .stores import existing_store, is_distributed, store_flag, store_option

if TYPE_CHECKING:
    from .._stores.contract import DurableStore

__all__ = ["approve", "grant", "reject"]


_DONE = {"approve": "approved call", "reject": "rejected call", "grant": "granted request"}


def _decision(fn: Callable[..., dict[str, Any]]) -> Callable[..., None]:
    """A command that decides with ``fn`` and says what it decided and what comes next."""

    @wraps(fn)
    def wrapper(run_id: str, store_path: str | None, as_json: bool, **kw: Any) -> None:
        store = existing_store(store_path)
        root = store.resolve(run_id)
        waiting = fn(store, root, **kw)
        if waiting["kind"] == "budget_request":
            given = {k: v for k, v in kw.items() if v and k != "call_id"}
            waiting = {**waiting, "tool": "more budget", "arguments": given}
        if is_distributed(store_path):
            assert store_path is not None
            from ..distributed._cli import requeue

            queued = requeue(store_path, root)
            click.echo(
                json.dumps({"run_id": root, "decided": fn.__name__, "queued": queued})
                if as_json
                else f"{_DONE[fn.__name__]} {waiting['call_id']} in run {waiting['run_id']}; "
                f"queued {queued}: the workers continue it"
            )
            return
        if as_json:
            call = json.loads(json.dumps(waiting, default=str))
            click.echo(json.dumps({"run_id": root, "decided": fn.__name__, "call": call}))
            return
        click.echo(
            f"{fn.__name__}: {waiting['tool']} {json.dumps(waiting['arguments'])} "
            f"(call {waiting['call_id']} in run {waiting['run_id']})"
        )
        click.echo(f"next: orchestra resume {root}{store_flag(store_path)}")

    return wrapper


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
