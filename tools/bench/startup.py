"""CLI start-up: wall time and peak RSS of commands against ``python -c pass``.

Each command runs in a fresh process (``posix_spawn``, output to /dev/null,
peak RSS from ``wait4``), all of them in turn, repeatedly, after one warm-up
round (file cache, .pyc files). The store holds one finished ``demo plan``
run: ``orchestra show`` shows it, ``orchestra cancel`` refuses it (the path a
person meets when the tree already stopped).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from . import common
from .common import row

FULL = {"repeats": 11}
QUICK = {"repeats": 2}


def _orchestra() -> list[str]:
    script = Path(common.PYTHON).parent / "orchestra"
    return [str(script)] if script.exists() else [common.PYTHON, "-m", "orchestra"]


def _finished_run(store: Path) -> str:
    cli = _orchestra()
    subprocess.run(
        [*cli, "demo", "plan", "--store", str(store), "--json"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    out = subprocess.run(
        [*cli, "runs", "--store", str(store), "--json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return str(json.loads(out)[0]["run_id"])


def _timed(argv: list[str]) -> tuple[float, float]:
    """Wall ms and peak RSS MB of one child running ``argv``."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    _, _, usage = os.wait4(pid, 0)
    return (time.perf_counter() - start) * 1e3, usage.ru_maxrss / 1024


def run(quick: bool) -> common.Section:
    p = QUICK if quick else FULL
    cli = _orchestra()
    with tempfile.TemporaryDirectory(prefix="orchestra-bench-cli-") as tmp:
        store = Path(tmp) / "runs.db"
        run_id = _finished_run(store)
        s = ["--store", str(store)]
        commands = {
            "python -c pass": [common.PYTHON, "-c", "pass"],
            "orchestra --help": [*cli, "--help"],
            "orchestra show RUN": [*cli, "show", run_id, *s],
            "orchestra cancel RUN (finished)": [*cli, "cancel", run_id, *s],
            "orchestra runs": [*cli, "runs", *s],
        }
        for argv in commands.values():
            _timed(argv)
        got: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(p["repeats"]):
            for name, argv in commands.items():
                got[name].append(_timed(argv))
    base = {"baseline": "python -c pass", "paired": True}
    py_wall = [w for w, _ in got["python -c pass"]]
    py_rss = [r for _, r in got["python -c pass"]]
    rows = [
        row(f"{name}: wall", "ms", [w for w, _ in got[name]], baseline_samples=py_wall, **base)
        for name in commands
        if name != "python -c pass"
    ]
    rows += [
        row(f"{name}: peak RSS", "MB", [r for _, r in got[name]], baseline_samples=py_rss, **base)
        for name in commands
        if name != "python -c pass"
    ]
    return common.section(
        "startup",
        "CLI start-up",
        f"This run: {p['repeats']} rounds.",
        rows,
    )
