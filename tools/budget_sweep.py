"""Sweep budgets with ``orchestra run`` against a server that counts prompts differently.

Starts ``orchestra serve-scripted`` on loopback, then runs, each in a fresh
process as a user would::

    orchestra run TASK --base-url URL --model runaway+prompt160 --max-budget B

for ``--runs`` budgets from ``--low`` to ``--high``. ``prompt160`` makes the
server report 60 % more prompt tokens than our o200k count (``--percent`` to
change it); ``runaway`` never answers, so only the budget stops it. Prints
each run's spend against its budget and exits 1 if any run spent past it.

    python tools/budget_sweep.py                      # 50 budgets, 160 %
    python tools/budget_sweep.py --percent 250 --runs 10
    python tools/budget_sweep.py --scenario reasoning     # a reasoning model, cached input
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from orchestra.testing import make_sandbox

TASK = "Look into the logs and tell me what went wrong."


def serve() -> tuple[subprocess.Popen[str], str]:
    """A scripted server on a free loopback port, and its base URL."""
    command = [sys.executable, "-m", "orchestra", "serve-scripted", "--port", "0"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    line = server.stderr.readline()
    if "http://" not in line:
        server.kill()
        raise SystemExit(f"the scripted server did not start: {line!r}")
    threading.Thread(target=server.stderr.read, daemon=True).start()  # never let it block
    return server, line[line.index("http://") :].strip()


def run_once(url: str, sandbox: Path, store: Path, model: str, budget: float) -> dict[str, Any]:
    """One ``orchestra run`` process; its JSON report."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "orchestra", "run", TASK),
            *("--base-url", url, "--model", model, "--max-budget", f"{budget:.6f}"),
            *("--max-turns", "200", "--dir", str(sandbox), "--store", str(store), "--json"),
            *("--price-in", "2", "--price-out", "12", "--price-cached", "0.5"),
            *("--api-key", "sweep-key-not-a-secret"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if not done.stdout.strip():
        raise SystemExit(f"orchestra run printed no report (exit {done.returncode}): {done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--low", type=float, default=0.0005)
    parser.add_argument("--high", type=float, default=0.02)
    parser.add_argument("--percent", type=int, default=160)
    parser.add_argument(
        "--scenario",
        default="runaway",
        help="the scripted model: runaway (never answers), or reasoning (thinks 300 tokens "
        "a step within max_completion_tokens, reports cached prompt tokens)",
    )
    args = parser.parse_args()
    step = (args.high - args.low) / max(args.runs - 1, 1)
    budgets = [args.low + i * step for i in range(args.runs)]
    server, url = serve()
    over = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sandbox, store = make_sandbox(Path(tmp) / "sandbox"), Path(tmp) / "runs.db"
            model = f"{args.scenario}+prompt{args.percent}"
            print(f"server {url}, model {model}")
            print(f"{'budget':>10} {'spent':>10} {'spent/budget':>12} {'turns':>5}  status")
            for budget in budgets:
                report = run_once(url, sandbox, store, model, budget)
                spent = report["tree_cost_usd"]
                over += spent > budget
                print(
                    f"{budget:10.6f} {spent:10.6f} {spent / budget:12.3f} {report['turns']:5d}  "
                    f"{report['status']}"
                )
    finally:
        server.kill()
        server.wait()
    print(f"{len(budgets)} runs, {over} over budget")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
