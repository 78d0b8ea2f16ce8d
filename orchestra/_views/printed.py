"""What the CLI prints for people (``--json`` prints the report itself).

Made for a terminal: the tree and the runs table fit its width (cells are cut
with ``…``, nothing wraps mid-token), statuses in colour on a terminal only
and never with ``NO_COLOR``. Every string is redacted of secrets (see
:mod:`orchestra._redact`) before it is laid out. rich is imported only here,
when something is printed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._redact import redact, redact_data
from .._state import RunState

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["conversations_together", "print_runs", "print_tree", "print_waiting"]


def _print(con: Console, line: Text | str, *, wrap: bool = False) -> None:
    """One line (cut to the width), or a paragraph wrapped at spaces if ``wrap``."""
    if wrap:
        con.print(line, overflow="fold", soft_wrap=False)
    else:
        con.print(line, no_wrap=True, overflow="ellipsis", crop=True, soft_wrap=False)


def print_tree(report: dict[str, Any]) -> None:
    """The run tree (one row per run, children in call order), then the root's
    answer, how it stopped, how long it ran and what is left of its budget."""
    from .text import Node, console, tree_lines

    report = redact_data(report)
    con = console()
    for line in tree_lines(Node.of(report), con.width, root_note=False):
        _print(con, line)
    for line in _footer(report):
        _print(con, line, wrap=True)


def _footer(report: dict[str, Any]) -> Iterator[Text]:
    from rich.text import Text

    from .text import (
        budget_usd,
        duration,
        settings_words,
        shape_words,
        status_text,
        token_details,
        tokens,
        usd,
    )

    if report["answer"]:
        label = "answer (partial, at a limit): " if report.get("answer_partial") else "answer: "
        yield Text.assemble("\n", (label, "bold"), report["answer"])
    stopped = Text.assemble("stopped: ", status_text(report["status"]))
    if report.get("reason"):
        stopped.append(f" ({report['reason']})")
    ms = report.get("run_elapsed_ms") or report.get("command_elapsed_ms")
    if ms:
        stopped.append(f" after {duration(ms)}")
    yield stopped
    spent = f"spent {usd(report['tree_cost_usd'])}"
    if report.get("budget_usd") is not None:
        left = usd(report["budget_left_usd"]) if report["budget_left_usd"] else "nothing"
        spent += f" of {budget_usd(report['budget_usd'])} ({left} left)"
    spent += f", {tokens(report.get('tree_tokens') or 0)} tokens"
    spent += token_details(
        report.get("tree_cached_input_tokens") or 0, report.get("tree_reasoning_tokens") or 0
    )
    if report.get("budget_tokens") is not None:
        spent += f" of {tokens(report['budget_tokens'])} ({tokens(report['tokens_left'])} left)"
    yield Text(spent)
    shape = shape_words(report.get("shape_limits") or {})
    if shape:
        yield Text(f"tree shape: {shape}")
    if report.get("settings"):
        yield Text(f"model settings: {settings_words(report['settings'])}")
    reused = sum(node.get("deduplicated_calls", 0) for node in _walk(report))
    if reused:
        calls = "1 repeated call" if reused == 1 else f"{reused} repeated calls"
        yield Text(f"deduplicated: {calls} answered from the transcript, not run again")
    if report.get("continues"):
        so_far = usd(report.get("conversation_cost_usd") or 0)
        yield Text(
            f"continues: {report['continues']} (conversation {report['conversation_id']}, "
            f"{so_far} so far)"
        )
    if report.get("dir"):
        yield Text(f"dir: {report['dir']}")
    if report.get("endpoint"):
        yield Text(f"endpoint: {report['endpoint']}")
    if report.get("trace_id"):
        yield Text(f"trace: {report['trace_id']}")


def _walk(report: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield report
    for child in report["children"]:
        yield from _walk(child)


def _call(decision: dict[str, Any]) -> str:
    from .text import cut

    args = json.dumps(decision["arguments"], sort_keys=True)
    return f"{decision['tool']} {cut(args, 60)}"


_SAID = {
    ("approved", True): "ran",
    ("approved", False): "not run yet: resume the run",
    ("rejected", True): "the model was told",
    ("rejected", False): "the model is told on resume",
    ("undecided", False): "the run stopped before anyone decided",
    ("granted", True): "by the parent's policy",
    ("passed on", True): "by the parent's policy, to a person",
}


def _decided(report: dict[str, Any]) -> Iterator[Text]:
    """One line per call a human decided on (or left undecided), in run order."""
    from rich.text import Text

    from .text import short_id

    styles = {
        "approved": "green",
        "rejected": "red",
        "undecided": "yellow",
        "granted": "green",
        "passed on": "yellow",
    }
    for run in _walk(report):
        for d in run.get("decisions", ()):
            if d["decision"] == "waiting":
                continue
            line = Text.assemble((f"  {d['decision']:<9}", styles[d["decision"]]), f" {_call(d)}")
            if d["reason"]:
                line.append(f": {d['reason']}")
            said = _SAID.get((d["decision"], d["done"]), "")
            line.append(f" ({said}; {d['call_id']} in {short_id(run['run_id'])})", style="dim")
            yield line


def print_waiting(report: dict[str, Any], store_flag: str) -> None:
    """The human decisions in the tree, and what the run waits for: a decision
    (with the commands that take it) or, once decided, a resume."""
    from rich.text import Text

    from .text import console

    report = redact_data(report)
    con = console()
    decided = list(_decided(report))
    if decided:
        _print(con, Text("\ndecisions:", style="bold"))
        for line in decided:
            _print(con, line, wrap=True)
    waiting = report.get("interruption")
    root = report.get("root_id") or report["run_id"]
    if waiting and waiting["kind"] == "budget_request":
        _print_request(con, waiting, root, store_flag)
        return
    if not waiting or waiting["kind"] not in ("approval", "unknown_outcome"):
        return
    run_id = report["run_id"]
    holder = next((r for r in _walk(report) if r["run_id"] == waiting["run_id"]), report)
    decision = next(
        (d for d in holder.get("decisions", ()) if d["call_id"] == waiting["call_id"]), None
    )
    resume = f"orchestra resume {root}{store_flag}"
    if decision is not None and decision["decision"] in ("approved", "rejected"):
        what = f"call {waiting['call_id']} ({waiting['tool']}) is {decision['decision']}"
        _print(con, Text.assemble("\n", (what, "bold"), "; the run is ready to resume:"), wrap=True)
        _print(con, f"  {resume}", wrap=True)
        return
    args = json.dumps(waiting["arguments"], sort_keys=True)
    lines = [
        Text.assemble("\n", ("waiting for a human: ", "bold magenta"), f"{waiting['tool']} {args}"),
        Text(f"  call {waiting['call_id']} in run {waiting['run_id']}: {waiting['reason']}"),
        Text(f"  approve: orchestra approve {run_id}{store_flag}"),
        Text(f'  reject:  orchestra reject {run_id}{store_flag} --reason "..."'),
        Text(f"  then:    {resume}"),
        Text("  (or decide and resume at once: add --resume)", style="dim"),
    ]
    for line in lines:
        _print(con, line, wrap=True)


def _print_request(con: Any, waiting: dict[str, Any], root: str, store_flag: str) -> None:
    """A run's request for more (``on_limit="ask"``), with the commands that answer it."""
    from rich.text import Text

    estimate = waiting.get("estimate_usd") or 0.0
    partial = " ".join(str(waiting.get("partial") or "").split())
    lines = [
        Text.assemble(
            "\n",
            ("asks for more: ", "bold magenta"),
            f"run {waiting['run_id']}, about ${estimate:.6f} to finish",
        ),
        Text(f"  answer so far: {partial[:240]}", style="dim"),
        Text(f"  grant:  orchestra grant {root} {_grant_flags(waiting)}{store_flag}"),
        Text(f"  reject: orchestra reject {root}{store_flag}  (ends it with its answer so far)"),
        Text(f"  then:   orchestra resume {root}{store_flag}"),
        Text("  (or decide and resume at once: add --resume)", style="dim"),
    ]
    for line in lines:
        _print(con, line, wrap=True)


def _grant_flags(waiting: dict[str, Any]) -> str:
    """The ``orchestra grant`` options that answer a budget request: the grant it
    says it needs (``--turns 3`` at a turn limit: USD alone adds no turns), or
    its estimate in USD for a request saved without one."""
    wanted = waiting.get("arguments") or {"usd": waiting.get("estimate_usd") or 0.0}
    flags = [f"--turns {wanted['turns']}"] if wanted.get("turns") else []
    if "usd" in wanted:
        flags.append(f"--usd {max(wanted['usd'], 1e-6):.6f}")
    if wanted.get("tokens"):
        flags.append(f"--tokens {wanted['tokens']}")
    return " ".join(flags)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def conversations_together(states: list[RunState]) -> list[RunState]:
    """``states`` (newest first) with the runs of each conversation together, where
    its newest run is: each continuation right above the run it continues."""
    by_conversation: dict[str, list[RunState]] = {}
    for state in states:
        by_conversation.setdefault(state.conversation, []).append(state)
    return [state for runs in by_conversation.values() for state in runs]


def print_runs(states: list[RunState]) -> None:
    """A table of runs, newest first (a conversation's runs together, each later one
    marked with the run it continues), within the terminal's width."""
    from .text import console, runs_lines

    now = time.time()
    rows = [
        {
            "run_id": s.run_id,
            "agent": redact(s.agent),
            "model": redact(s.model),
            "continues": s.continues,
            "status": s.status.value,
            "waits_for": s.interruption.kind.value if s.interruption else None,
            "turns": s.turns,
            "cost_usd": s.own.cost_usd,
            "tree_cost_usd": s.tree.cost_usd,
            "age": _age(now - s.updated_at),
        }
        for s in conversations_together(states)
    ]
    con = console()
    for line in runs_lines(rows, con.width):
        _print(con, line)
