"""Benchmark: how long the command line takes to start, against bare Python.

Runs, interleaved in the same run (so a busy machine slows them alike), N
times each: ``python -c pass``, ``orchestra --help``, ``orchestra cancel RUN``
of a finished run (it refuses: the run is not running, the path a person
meets when they cancel a tree that has already stopped), ``orchestra runs``
and ``orchestra show RUN``. The store holds one finished ``demo plan`` run,
made first. Reports per command the median wall time, the median peak RSS of
the child (``ru_maxrss`` from ``wait4``) and the wall-time ratio to
``python -c pass``.

    python tools/bench_startup.py [--repeats 21] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PYTHON = sys.executable
ORCHESTRA = str(Path(PYTHON).parent / "orchestra")


def finished_run(store: Path) -> str:
    """Make a store holding one finished run; its id."""
    subprocess.run(
        [ORCHESTRA, "demo", "plan", "--store", str(store), "--json"],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [ORCHESTRA, "runs", "--store", str(store), "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    run_id: str = json.loads(out)[0]["run_id"]
    return run_id


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall milliseconds and peak RSS in MB of one child running ``argv``."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    _, _, usage = os.wait4(pid, 0)
    wall = (time.perf_counter() - start) * 1000
    rss_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return wall, rss_mb


def bench(repeats: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="orchestra-bench-") as tmp:
        store = Path(tmp) / "runs.sqlite"
        run_id = finished_run(store)
        s = ["--store", str(store)]
        commands = {
            "python -c pass": [PYTHON, "-c", "pass"],
            "orchestra --help": [ORCHESTRA, "--help"],
            "orchestra cancel RUN (finished)": [ORCHESTRA, "cancel", run_id, *s],
            "orchestra runs": [ORCHESTRA, "runs", *s],
            "orchestra show RUN": [ORCHESTRA, "show", run_id, *s],
        }
        for argv in commands.values():  # warm the file cache and .pyc files
            timed(argv)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(repeats):
            for name, argv in commands.items():
                samples[name].append(timed(argv))
    base = statistics.median(w for w, _ in samples["python -c pass"])
    rows = []
    for name, got in samples.items():
        wall = statistics.median(w for w, _ in got)
        rss = statistics.median(r for _, r in got)
        rows.append(
            {"command": name, "wall_ms": round(wall, 1), "rss_mb": round(rss, 1),
             "ratio": round(wall / base, 1)}
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--json", action="store_true", help="Print JSON rows.")
    args = parser.parse_args()
    rows = bench(args.repeats)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'command':<34}{'median ms':>10}{'peak RSS MB':>13}{'× python':>10}")
    for row in rows:
        print(
            f"{row['command']:<34}{row['wall_ms']:>10.1f}{row['rss_mb']:>13.1f}{row['ratio']:>10.1f}"
        )


if __name__ == "__main__":
    main()
