"""The design's six tasks on a real local model, judged against the files' facts.

Each task is one ``orchestra run`` as a user types it (the default tools and
instructions, 6 turns, $0.05 at the design's $2 / $12 per million tokens),
against any OpenAI-compatible endpoint: by default the local llama.cpp server
of ``tools/local_model.py`` (``$ORCHESTRA_LOCAL_MODEL_URL``, else
http://127.0.0.1:8090/v1), over the sandbox's three files (errors.log,
access.log, notes.txt)::

    python tools/local_model.py start --size 1.5b
    python examples/six_tasks.py [--repeat 3]

Each answer is judged by what the files say, computed from them, not by
wording (the ``TASKS`` judges), and checked for text copied from the harness
(the chat template, the instructions, the tool descriptions: eight words in a
row, as "The tool results above answer your earlier call." was).
Prints per task right or wrong, turns, tool runs, seconds per turn and the
time to the first streamed chunk, then the count right, the mean turn time and
the first-token times (the first request of all, on a cold server, apart).
``--json`` prints the same as one JSON object. The server decodes greedily
(temperature 0: ``tools/local_model.py``), so repeats differ only as much as
llama.cpp's batching does; ``--repeat`` runs the six that many times.

Exit 1 if a run spent past its budget or an answer copies the harness.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from statistics import mean, median
from typing import Any

import httpx

from orchestra.testing import make_sandbox

DEFAULT_URL = "http://127.0.0.1:8090/v1"
TEMPLATE = Path(__file__).resolve().parent.parent / "tools/local_model/qwen_tools_fenced.jinja"
BUDGET_USD = 0.05
WIDTH = 80
COPIED_WORDS = 8
"""An answer with this many words in a row from the harness's own text copies it."""

Judge = Callable[[str, dict[str, str]], bool]


def _names(answer: str, files: dict[str, str]) -> list[str]:
    """The sandbox's file names the answer mentions, in the order it first does."""
    found = [(answer.find(name), name) for name in files if name in answer]
    return [name for _, name in sorted(found)]


def _mentions_timeout(answer: str, files: dict[str, str]) -> bool:
    said = set(_names(answer, files))
    right = {n for n, text in files.items() if re.search(r"time[sd]? ?out", text, re.I)}
    return bool(said) and said <= right


def _file_count(answer: str, files: dict[str, str]) -> bool:
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    n = len(files)
    return re.search(rf"\b({n}|{words.get(n, n)})\b", answer, re.I) is not None


def _notes(answer: str, files: dict[str, str]) -> bool:
    """At least three of the note's facts."""
    facts = ("restart", "errors.log", "eight", "thirty", "504", "on-call", "delete")
    text = files["notes.txt"].lower()
    return sum(f in answer.lower() for f in facts if f in text) >= 3


def _read_each(answer: str, files: dict[str, str]) -> bool:
    """Every file named, and something each one says (a distinctive word of it)."""
    marks = {"errors.log": "timed out", "access.log": "/health", "notes.txt": "restart"}
    low = answer.lower()
    return all(name in answer and marks[name] in low for name in files)


def _largest(answer: str, files: dict[str, str]) -> bool:
    said = _names(answer, files)
    biggest = max(files, key=lambda n: len(files[n].encode()))
    return bool(said) and said[0] == biggest


def _rotating(answer: str, files: dict[str, str]) -> bool:
    """No file is about rotating logs: a plain no."""
    if any("rotat" in text.lower() for text in files.values()):
        raise AssertionError("the sandbox changed: a file mentions rotation")
    low = answer.lower()
    return not low.startswith("yes") and re.search(r"\b(no|not|none|n't)\b", low) is not None


TASKS: tuple[tuple[str, Judge], ...] = (
    ("Which file mentions a timeout?", _mentions_timeout),
    ("How many files are in the directory?", _file_count),
    ("Read notes.txt and tell me what it says.", _notes),
    ("List the files and then read each one.", _read_each),
    ("Which file is the largest?", _largest),
    ("Is there a file about rotating logs?", _rotating),
)


def harness_text() -> list[str]:
    """The words of what the harness itself writes into the prompt."""
    from orchestra import CATALOG_INSTRUCTIONS, catalog

    texts = [TEMPLATE.read_text(), CATALOG_INSTRUCTIONS]
    texts += [t.description for t in catalog(".")]
    return re.findall(r"[a-z0-9']+", " ".join(texts).lower())


def copies_harness(answer: str, harness: list[str]) -> bool:
    runs = {tuple(harness[i : i + COPIED_WORDS]) for i in range(len(harness) - COPIED_WORDS + 1)}
    words = re.findall(r"[a-z0-9']+", answer.lower())
    return any(
        tuple(words[i : i + COPIED_WORDS]) in runs for i in range(len(words) - COPIED_WORDS + 1)
    )


def run_task(task: str, args: argparse.Namespace, box: Path, store: Path) -> dict[str, Any]:
    """``orchestra run TASK`` with its events: the report and each turn's event."""
    command = [
        *(sys.executable, "-m", "orchestra", "run", task),
        *("--base-url", args.base_url, "--model", args.model, "--api-key", "local"),
        *("--dir", str(box), "--store", str(store), "--max-turns", "6"),
        *("--max-budget", str(BUDGET_USD), "--price-in", "2", "--price-out", "12"),
        "--json-events",
        *(["--budget-note"] if args.budget_note else []),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    reports = [e for e in events if e.get("type") == "report"]
    if not reports:
        raise SystemExit(f"orchestra run gave no report (exit {out.returncode}):\n{out.stderr}")
    turns = [e for e in events if e.get("type") == "turn"]
    return {"report": reports[0], "turns": turns}


def judged(task: str, judge: Judge, ran: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    report, turns = ran["report"], ran["turns"]
    answer = report["answer"] or ""
    elapsed = (report.get("run_elapsed_ms") or 0) / 1000
    return {
        "task": task,
        "status": report["status"],
        "reason": report["reason"],
        "answer": answer,
        "right": report["status"] == "completed" and judge(answer, files),
        "turns": report["turns"],
        "tool_runs": report["tool_runs"],
        "seconds": elapsed,
        "first_token_s": [t.get("time_to_first_chunk_s") for t in turns],
        "tree_cost_usd": report["tree_cost_usd"],
    }


def line(row: dict[str, Any]) -> str:
    mark = "right" if row["right"] else "WRONG"
    per_turn = row["seconds"] / max(row["turns"], 1)
    firsts = [f for f in row["first_token_s"] if f is not None]
    first = f"{max(firsts):5.1f}" if firsts else "    -"
    head = f"{mark:5} {row['turns']:>5} {row['tool_runs']:>5} {per_turn:6.1f} {first}  "
    said = (
        f'-> "{" ".join(row["answer"].split())}"'
        if row["status"] == "completed"
        else (f"[{row['status']}: {row['reason']}]")
    )
    return _cut(head + row["task"]) + "\n" + _cut(" " * 31 + said)


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


HEADER = "right turns tools  s/turn first  task / answer"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    firsts = [f for r in rows for f in r["first_token_s"] if f is not None]
    turns = sum(r["turns"] for r in rows)
    return {
        "right": sum(r["right"] for r in rows),
        "tasks": len(rows),
        "seconds_per_turn": sum(r["seconds"] for r in rows) / max(turns, 1),
        "first_token_cold_s": firsts[0] if firsts else None,
        "first_token_warm_max_s": max(firsts[1:], default=None),
        "first_token_warm_mean_s": mean(firsts[1:]) if firsts[1:] else None,
        "first_token_warm_median_s": median(firsts[1:]) if firsts[1:] else None,
        "over_budget": [r["task"] for r in rows if r["tree_cost_usd"] > BUDGET_USD],
        "copies_harness": [r["task"] for r in rows if r["copies"]],
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    default_url = os.environ.get("ORCHESTRA_LOCAL_MODEL_URL") or DEFAULT_URL
    parser.add_argument("--base-url", default=default_url, help=f"default {default_url}")
    parser.add_argument("--model", default="local")
    parser.add_argument("--repeat", type=int, default=1, help="run the six this many times")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--budget-note", action="store_true", help="orchestra run --budget-note: show what is left"
    )
    return parser.parse_args()


def check_server(url: str) -> None:
    """Exit with a clear message unless ``{url}/models`` answers."""
    try:
        httpx.get(f"{url.rstrip('/')}/models", timeout=5.0).raise_for_status()
    except httpx.HTTPError as exc:
        raise SystemExit(
            f"no model server at {url} ({exc}); start one with "
            "`python tools/local_model.py start` or pass --base-url"
        ) from None


def main() -> None:
    args = arguments()
    check_server(args.base_url)
    harness = harness_text()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="six-tasks-") as tmp:
        box = make_sandbox(Path(tmp) / "sandbox")
        files = {p.name: p.read_text() for p in sorted(box.iterdir())}
        if not args.json:
            print(f"{args.model} at {args.base_url}; 6 turns, ${BUDGET_USD} per task\n{HEADER}")
        for _ in range(args.repeat):
            for task, judge in TASKS:
                row = judged(task, judge, run_task(task, args, box, Path(tmp) / "runs.db"), files)
                row["copies"] = copies_harness(row["answer"], harness)
                rows.append(row)
                if not args.json:
                    print(line(row), flush=True)
    total = summary(rows)
    if args.json:
        print(json.dumps({"summary": total, "rows": rows}, indent=1))
    else:
        print(
            f"RIGHT {total['right']} of {total['tasks']}; {total['seconds_per_turn']:.1f} s per "
            f"turn; first token {total['first_token_cold_s'] or 0:.1f} s cold, warm at most "
            f"{total['first_token_warm_max_s'] or 0:.1f} s"
        )
    if total["over_budget"] or total["copies_harness"]:
        raise SystemExit(f"over budget: {total['over_budget']}; copies: {total['copies_harness']}")


if __name__ == "__main__":
    main()
