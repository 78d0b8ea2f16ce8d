"""What the CLI prints for people (``--json`` prints the report itself).

Every line is redacted of secrets (see :mod:`orchestra._redact`) before it is printed.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from ._redact import redact
from ._state import RunState

__all__ = ["print_runs", "print_tree", "print_waiting"]


def _echo(text: str) -> None:
    """Print one line for people, secrets redacted."""
    click.echo(redact(text))


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
    _echo(_line(report, depth))
    indent = "  " * depth + "   "
    _echo(f"{indent}per-turn prompt tokens: {report['per_turn_prompt_tokens']}")
    if report["answer"]:
        _echo(f"{indent}answer: {report['answer']}")
    for child in report["children"]:
        print_tree(child, depth + 1)
    if depth == 0 and report.get("dir"):
        _echo(f"dir: {report['dir']}")
    if depth == 0 and report.get("trace_id"):
        _echo(f"trace: {report['trace_id']}")


def print_waiting(report: dict[str, Any], store_flag: str) -> None:
    """For a run waiting on a human: the call and the commands that decide it."""
    waiting = report.get("interruption")
    if not waiting or waiting["kind"] not in ("approval", "unknown_outcome"):
        return
    root = report["run_id"]
    args = json.dumps(waiting["arguments"], sort_keys=True)
    _echo(f"\nwaiting for a human: {waiting['tool']} {args}")
    _echo(f"  call {waiting['call_id']} in run {waiting['run_id']}: {waiting['reason']}")
    _echo(f"  approve: orchestra approve {root}{store_flag} && orchestra resume {root}{store_flag}")
    _echo(
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
    _echo(
        f"{'run id':<21} {'agent':<12} {'status':<19} {'turns':>5} "
        f"{'own $':>10} {'tree $':>10} {'age':>5}"
    )
    now = time.time()
    for s in states:
        _echo(
            f"{s.run_id:<21} {s.agent[:12]:<12} {s.status.value:<19} {s.turns:>5} "
            f"{s.own.cost_usd:>10.6f} {s.tree.cost_usd:>10.6f} {_age(now - s.updated_at):>5}"
        )
