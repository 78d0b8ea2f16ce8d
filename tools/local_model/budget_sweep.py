"""Budgets against the real local model: spend by the server's own usage never passes them.

Runs, each in a fresh process as a user would (so nothing learnt about the
server carries over from one run to the next)::

    orchestra run TASK --base-url URL --model local --max-budget B --trace T.jsonl ...

for ``--runs`` budgets from ``--low`` to ``--high`` USD, priced at $2 / $12
per million tokens. The spend of each run is recomputed from the trace's
``turn`` events, i.e. from the ``usage`` the server reported for each
reply, and compared with the budget and with Orchestra's own books. Exits 1
if any run spent past its budget. Run with the project's Python while the
server runs (``python tools/local_model.py start``)::

    python tools/local_model/budget_sweep.py --runs 12 --low 0.0005 --high 0.008
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestra.testing import make_sandbox

TASK = "Read every file, one by one, and tell me what each says."
PRICE_IN, PRICE_OUT = 2.0, 12.0


def run_once(args: argparse.Namespace, work: Path, budget: float, n: int) -> dict[str, Any]:
    """One ``orchestra run`` process; its JSON report plus the server-usage spend."""
    trace = work / f"trace-{n}.jsonl"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "orchestra", "run", TASK, "--base-url", args.base_url),
            *("--model", args.model, "--max-budget", f"{budget:.6f}", "--json"),
            *("--max-turns", str(args.max_turns), "--max-tokens", str(args.max_tokens)),
            *("--dir", str(work / "sandbox"), "--store", str(work / "runs.db")),
            *("--trace", str(trace), "--price-in", str(PRICE_IN), "--price-out", str(PRICE_OUT)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if not done.stdout.strip():
        raise SystemExit(f"orchestra run printed no report (exit {done.returncode}): {done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    report["server_spend"] = server_spend(trace)
    return report


def server_spend(trace: Path) -> float:
    """USD of every reply by the usage the server reported (its own token counts)."""
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    turns = [e for e in events if e["type"] == "turn"]
    if not all(t["usage_reported"] for t in turns):
        raise SystemExit(f"{trace}: a reply came without usage")
    tokens = sum(PRICE_IN * t["prompt_tokens"] + PRICE_OUT * t["completion_tokens"] for t in turns)
    return float(tokens) / 1e6


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    default_url = os.environ.get("ORCHESTRA_LOCAL_MODEL_URL") or "http://127.0.0.1:8090/v1"
    parser.add_argument("--base-url", default=default_url)
    parser.add_argument("--model", default="local")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--low", type=float, default=0.0005)
    parser.add_argument("--high", type=float, default=0.008)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    return parser.parse_args()


def main() -> int:
    args = arguments()
    step = (args.high - args.low) / max(args.runs - 1, 1)
    budgets = [args.low + i * step for i in range(args.runs)]
    over = 0
    print(f"{'budget':>9} {'server':>9} {'ours':>9} {'used':>6} {'turns':>5}  status / reason")
    with tempfile.TemporaryDirectory(prefix="local-budget-") as tmp:
        make_sandbox(Path(tmp) / "sandbox")
        for n, budget in enumerate(budgets):
            report = run_once(args, Path(tmp), budget, n)
            spent = report["server_spend"]
            over += spent > budget or report["tree_cost_usd"] > budget
            print(
                f"{budget:9.6f} {spent:9.6f} {report['tree_cost_usd']:9.6f} "
                f"{spent / budget:6.1%} {report['turns']:5d}  "
                f"{report['status']}: {report['reason'][:30]}",
                flush=True,
            )
    print(f"{len(budgets)} runs, {over} over budget (server = spend by the server's usage)")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
