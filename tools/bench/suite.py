"""The suite: every section in a fresh worker process, in turn; the report after each.

A section that fails or runs out of time is reported as not measured; the
others still run. See ``tools/benchmarks.py`` for the command line.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from . import (
    cancel,
    common,
    concurrency,
    counting,
    memory,
    persistence,
    report,
    scaleout,
    startup,
    tracing,
    trees,
    turns,
)

SECTIONS: dict[str, ModuleType] = {
    "turn_overhead": turns,
    "concurrency": concurrency,
    "idle_rss": memory,
    "trees": trees,
    "cancel": cancel,
    "persistence": persistence,
    "tracing": tracing,
    "counting": counting,
    "startup": startup,
    "scaleout": scaleout,
}
TITLES = {
    "turn_overhead": "Overhead per turn",
    "concurrency": "Concurrent runs over loopback HTTP",
    "idle_rss": "Idle RSS",
    "trees": "Trees",
    "cancel": "Cancel a tree",
    "persistence": "Persistence per step",
    "tracing": "Tracing on vs off",
    "counting": "Prompt-count cost per turn",
    "startup": "CLI start-up",
    "scaleout": "Scale-out: workers over PostgreSQL",
}
EXPECTED_TARGETS = {
    "turn_overhead": ["client CPU per turn over HTTP ≤ 1.1× bare"],
    "concurrency": ["throughput at 200 concurrent ≥ 1.0× bare", "10,000 concurrent runs complete"],
    "idle_rss": ["idle RSS < 60 MB"],
    "trees": ["10×10×10 ≤ 1.2× flat per model call"],
    "cancel": ["cancel of a 100-run tree with SQLite ≤ 10 ms"],
    "persistence": ["SQLite save at turn 500 ≤ 2× turn 10"],
    "scaleout": [
        "worker CPU per model call ≤ 3× embedded",
        "trees/s 1 → 4 workers ≥ 3.5× (200 ms latency)",
        "a burst of 10× the cluster's slots completes",
    ],
}
TIMEOUT_S = {"concurrency": 480.0, "scaleout": 2700.0}
DEFAULT_TIMEOUT_S = 240.0
QUICK_TIMEOUT_S = {"scaleout": 420.0}
DEFAULT_QUICK_TIMEOUT_S = 120.0


def _markdown_doc(module: ModuleType) -> str:
    """The module docstring after its first line, as one Markdown paragraph."""
    body = (module.__doc__ or "").split("\n\n", 1)[1:]
    text = " ".join(" ".join(body).split())
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def section_worker(params: dict[str, Any]) -> None:
    """Worker: run one section, print its result."""
    module = SECTIONS[params["id"]]
    result = module.run(params["quick"])
    result["method"] = f"{_markdown_doc(module)} {result['method']}".strip()
    common.emit(final=True, section=result)


def _failed(sid: str, error: str) -> dict[str, Any]:
    failed = common.section(sid, TITLES[sid], "", [])
    failed["error"] = error
    failed["expected_targets"] = EXPECTED_TARGETS.get(sid, [])
    return failed


def _write(results: dict[str, Any], out: Path, json_path: Path, previous: Any) -> None:
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    out.write_text(report.markdown(results, json_path.name, previous), encoding="utf-8")


def _kept(json_path: Path, only: list[str]) -> list[dict[str, Any]]:
    """The sections of the report at ``json_path`` not in ``only``, each stamped with
    the run that measured it (for ``--update``)."""
    if not json_path.exists():
        return []
    earlier = json.loads(json_path.read_text(encoding="utf-8"))
    kept = [sec for sec in earlier.get("sections", []) if sec["id"] not in only]
    for sec in kept:
        sec.setdefault("measured", _stamp(earlier["machine"], earlier["command"]))
    return kept


def _stamp(machine: dict[str, Any], command: str) -> dict[str, Any]:
    """When, at which commit and how loaded a section was measured, and by what command."""
    keys = ("date", "commit", "uncommitted_changes", "load_average")
    return {**{k: machine.get(k) for k in keys}, "command": command}


def _place(results: dict[str, Any], sec: dict[str, Any]) -> None:
    """Put ``sec`` in the report in the suite's order, replacing an earlier one."""
    order = list(SECTIONS)
    rest = [s for s in results["sections"] if s["id"] != sec["id"]]
    results["sections"] = sorted([*rest, sec], key=lambda s: order.index(s["id"]))


def main(
    *,
    quick: bool,
    out: Path,
    json_path: Path,
    only: list[str],
    previous: Any,
    command: str,
    update: bool = False,
) -> int:
    """Run the sections (all, or ``only``), writing the report after each; 0 if none failed.

    ``update``: the report keeps the sections of the one at ``json_path`` that
    this run does not measure (each says when it was measured).
    """
    started = time.perf_counter()
    machine = common.machine()
    results: dict[str, Any] = {
        "command": command,
        "quick": quick,
        "machine": machine,
        "sections": _kept(json_path, only) if update else [],
        "total_s": None,
    }
    failures = 0
    for sid in only or list(SECTIONS):
        print(f"[{time.perf_counter() - started:6.1f} s] {TITLES[sid]} ...", file=sys.stderr)
        t0 = time.perf_counter()
        timeout = (
            QUICK_TIMEOUT_S.get(sid, DEFAULT_QUICK_TIMEOUT_S)
            if quick
            else TIMEOUT_S.get(sid, DEFAULT_TIMEOUT_S)
        )
        try:
            line = common.run_worker("section", {"id": sid, "quick": quick}, timeout)
            sec = line["section"]
        except Exception as exc:  # report it and go on with the next section
            sec = _failed(sid, str(exc))
            failures += 1
            print(f"    failed: {exc}", file=sys.stderr)
        sec["seconds"] = time.perf_counter() - t0
        sec["measured"] = _stamp(machine, command)
        _place(results, sec)
        _write(results, out, json_path, previous)
    results["total_s"] = time.perf_counter() - started
    results["load_average_at_end"] = list(os.getloadavg())
    _write(results, out, json_path, previous)
    print(f"[{results['total_s']:6.1f} s] wrote {out} and {json_path}", file=sys.stderr)
    for sec in results["sections"]:
        for t in sec["targets"]:
            mark = {True: "met", False: "NOT MET", None: "?"}[t["met"]]
            print(f"  {mark:8} {t['text']}: {t['value']}", file=sys.stderr)
    return 1 if failures else 0
