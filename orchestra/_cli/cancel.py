"""``orchestra cancel``: stop a tree running in another process or on workers."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click

from .._approval import stop_from_outside
from .._exceptions import StateError
from .._state import RunState, Status
from .common import json_option
from .errors import CommandError
from .options import SECONDS
from .stores import existing_store, is_distributed, store_flag, store_option

if TYPE_CHECKING:
    from .._stores.contract import DurableStore

__all__ = ["cancel"]


@click.command()
@click.argument("run_id")
@click.option(
    "--reason",
    default="cancelled from the command line",
    show_default=True,
    help="Recorded as the reason the tree stopped.",
)
@click.option(
    "--wait",
    "wait_s",
    type=SECONDS,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds to wait for the running process to stop the tree.",
)
@store_option
@json_option
def cancel(run_id: str, reason: str, wait_s: float, store_path: str | None, as_json: bool) -> None:
    """Cancel a run tree that is running in another process (or on workers)."""
    store = existing_store(store_path)
    if is_distributed(store_path):
        assert store_path is not None
        _cancel_everywhere(store, store_path, run_id, reason, wait_s, as_json)
        return
    target = store.resolve(run_id)
    asked = time.monotonic()
    try:
        stopped = stop_from_outside(store, target, reason)
    except StateError as exc:
        raise CommandError(str(exc)) from None
    if stopped is not None:
        _said_unowned(store.load(target), reason, stopped, as_json, store_path)
        return
    while store.load(target).status is Status.RUNNING:
        if time.monotonic() - asked > wait_s:
            store.clear_cancel(target)
            raise CommandError(
                f"no process stopped run {target} within {wait_s:g} s; the request was "
                "withdrawn (try again, or stop the process)"
            )
        time.sleep(0.005)
    ms = (time.monotonic() - asked) * 1000
    state = store.load(target)
    out = {
        "run_id": target,
        "status": state.status.value,
        "reason": state.reason,
        "stopped_after_ms": round(ms, 1),
    }
    click.echo(
        json.dumps(out)
        if as_json
        else f"{target} {state.status.value} ({state.reason}) {ms:.0f} ms after the request"
    )


def _cancel_everywhere(
    store: DurableStore, store_path: str, run_id: str, reason: str, wait_s: float, as_json: bool
) -> None:
    """Cancel a tree on every worker; one line (or JSON) saying how it went."""
    from ..distributed._cli import cancel_everywhere

    target = store.resolve(run_id)
    out = cancel_everywhere(store_path, target, reason, wait_s)
    if as_json:
        click.echo(json.dumps(out))
    else:
        runs = ", ".join(f"{n} {status}" for status, n in sorted(out["runs"].items()))
        click.echo(f"{out['root_id']}: {runs} ({out['stopped_after_ms']:.0f} ms)")
    if out["still_running"]:
        raise CommandError(
            f"{len(out['still_running'])} run(s) still running after {wait_s:g} s; their "
            "workers stop them when they next look (or when declared dead)"
        )


def _said_unowned(
    state: RunState, reason: str, stopped: list[str], as_json: bool, store_path: str | None
) -> None:
    """Say that a run whose process died was stopped here (in the store)."""
    note = "no process was running it (its process had stopped)"
    if as_json:
        out = {"run_id": state.run_id, "status": "interrupted", "reason": reason}
        click.echo(json.dumps({**out, "stopped": stopped, "note": note}))
        return
    how_many = f"{len(stopped)} run" if len(stopped) == 1 else f"{len(stopped)} runs"
    click.echo(f"{state.run_id} interrupted ({reason}): {note}; {how_many} stopped")
    click.echo(f"next: orchestra resume {state.root_id}{store_flag(store_path)}")
