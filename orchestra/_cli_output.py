"""What the CLI prints for people (``--json`` prints the report itself)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from ._state import RunState

__all__ = ["print_runs", "print_tree", "print_waiting"]


def _line(report: dict[str, Any], depth: int) -> str:
    pad = "  " * depth + ("└─ " if depth else "")
    why = f" ({report['reason']})" if report["status"] != "completed" and report["reason"] else ""
    line = (
        f"{pad}{report['agent']} {report['run_id']} {report['status']}{why}"
        f" | turns={report['turns']} tools={report['tool_runs']}"
        f" in={report['prompt_tokens']} out={report['completion_tokens']}"
        f" cost=${report['cost_usd']:.6f} tree=${report['tree_cost_usd']:.6f}"
    )
    if depth == 0 and report.get("elapsed_ms") is not None:
        line += f" ms={report['elapsed_ms']:.0f}"
    return line


def print_tree(report: dict[str, Any], depth: int = 0) -> None:
    """The run and its children, one block per run."""
    click.echo(_line(report, depth))
    indent = "  " * depth + "   "
    click.echo(f"{indent}per-turn prompt tokens: {report['per_turn_prompt_tokens']}")
    if report["answer"]:
        click.echo(f"{indent}answer: {report['answer']}")
    for child in report["children"]:
        print_tree(child, depth + 1)
    if depth == 0 and report.get("dir"):
        click.echo(f"dir: {report['dir']}")
    if depth == 0 and report.get("trace_id"):
        click.echo(f"trace: {report['trace_id']}")


def print_waiting(report: dict[str, Any], store_flag: str) -> None:
    """For a run waiting on a human: the call and the commands that decide it."""
    waiting = report.get("interruption")
    if not waiting or waiting["kind"] not in ("approval", "unknown_outcome"):
        return
    root = report["run_id"]
    args = json.dumps(waiting["arguments"], sort_keys=True)
    click.echo(f"\nwaiting for a human: {waiting['tool']} {args}")
    click.echo(f"  call {waiting['call_id']} in run {waiting['run_id']}: {waiting['reason']}")
    click.echo(
        f"  approve: orchestra approve {root}{store_flag} && orchestra resume {root}{store_flag}"
    )
    click.echo(
        f'  reject:  orchestra reject {root}{store_flag} --reason "..." && '
        f"orchestra resume {root}{store_flag}"
    )


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def print_runs(states: list[RunState]) -> None:
    """A table of runs, newest first."""
    click.echo(
        f"{'run id':<21} {'agent':<12} {'status':<19} {'turns':>5} "
        f"{'own $':>10} {'tree $':>10} {'age':>5}"
    )
    now = time.time()
    for s in states:
        click.echo(
            f"{s.run_id:<21} {s.agent[:12]:<12} {s.status.value:<19} {s.turns:>5} "
            f"{s.own.cost_usd:>10.6f} {s.tree.cost_usd:>10.6f} {_age(now - s.updated_at):>5}"
        )
