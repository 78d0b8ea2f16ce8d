"""Idle RSS: a process ready to run agents that has run nothing, against a bare one.

Each probe is a fresh ``python -c`` (nothing of the suite imported): Orchestra
imports ``orchestra``, builds an ``OpenAIProvider`` and a ``Runner`` (default
``MemoryStore``); the bare probe imports trio and httpx and builds an
``httpx.AsyncClient``; ``python -c pass`` is the floor. RSS is read from
/proc/self/status after a garbage collection (VmRSS; VmHWM is the peak).
Import time: wall time from the probe's first line to the end of its
imports and builds (the interpreter's own start-up apart). Probes alternate.
"""

from __future__ import annotations

import subprocess

from . import common
from .common import row

FULL = {"repeats": 7}
QUICK = {"repeats": 2}
URL = "http://127.0.0.1:9/v1"
START = "import time\nstarted = time.perf_counter()\n"
REPORT = (
    "took = (time.perf_counter() - started) * 1000\n"
    "import gc; gc.collect()\n"
    "s = {l.split(':')[0]: l.split()[1] for l in open('/proc/self/status') if l.startswith('Vm')}\n"
    "print(int(s['VmRSS']) / 1024, int(s['VmHWM']) / 1024, took)\n"
)
PROBES = {
    "orchestra": (
        "import orchestra\n"
        "from orchestra import OpenAIProvider, Runner\n"
        f"runner = Runner(provider=OpenAIProvider(base_url={URL!r}, api_key='bench'))\n"
    ),
    "bare": (f"import trio, httpx\nclient = httpx.AsyncClient(base_url={URL!r}, headers={{}})\n"),
    "python": "",
}


def _probe(code: str) -> tuple[float, float, float]:
    out = subprocess.run(
        [common.PYTHON, "-c", START + code + REPORT],
        capture_output=True,
        text=True,
        check=True,
        cwd=common.ROOT,
        timeout=60,
    ).stdout.split()
    return float(out[-3]), float(out[-2]), float(out[-1])


def run(quick: bool) -> common.Section:
    p = QUICK if quick else FULL
    rss: dict[str, list[float]] = {name: [] for name in PROBES}
    peak: dict[str, list[float]] = {name: [] for name in PROBES}
    took: dict[str, list[float]] = {name: [] for name in PROBES}
    for i in range(p["repeats"]):
        names = list(PROBES) if i % 2 == 0 else list(reversed(PROBES))
        for name in names:
            now, high, ms = _probe(PROBES[name])
            rss[name].append(now)
            peak[name].append(high)
            took[name].append(ms)
    bare = "bare: trio + httpx + AsyncClient"
    rows = [
        row(
            "Orchestra + Runner + provider: RSS",
            "MB",
            rss["orchestra"],
            baseline=bare,
            baseline_samples=rss["bare"],
            paired=True,
        ),
        row(
            "Orchestra + Runner + provider: peak RSS",
            "MB",
            peak["orchestra"],
            baseline=bare,
            baseline_samples=peak["bare"],
            paired=True,
        ),
        row(
            "bare: trio + httpx + AsyncClient: RSS",
            "MB",
            rss["bare"],
            baseline="python -c pass",
            baseline_samples=rss["python"],
            paired=True,
        ),
        row(
            "Orchestra + Runner + provider: import and build",
            "ms",
            took["orchestra"],
            baseline=bare,
            baseline_samples=took["bare"],
            paired=True,
        ),
    ]
    value, import_ms = rows[0]["median"], rows[3]["median"]
    result = common.section(
        "idle_rss",
        "Idle RSS",
        f"This run: {p['repeats']} processes per probe.",
        rows,
        [
            common.target(
                "idle RSS ≤ 50 MB",
                f"{common.fmt(value)} MB ({common.ratio_text(rows[0]['ratio'])} bare)",
                value <= 50,
            ),
            common.target(
                "import and build ≤ 150 ms",
                f"{common.fmt(import_ms)} ms ({common.ratio_text(rows[3]['ratio'])} bare)",
                None if quick else import_ms <= 150,  # an absolute time needs repeats
            ),
        ],
    )
    result["notes"].append(
        "The tokenizer (about 50 MB) is built on a process's first model call, so it is not "
        "in these figures; the concurrency section's RSS before the runs includes it."
    )
    return result
