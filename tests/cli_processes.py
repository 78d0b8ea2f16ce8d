"""Helpers for tests that run the command line in processes of its own."""

from __future__ import annotations

import subprocess
import sys

ENDLESS = [
    sys.executable,
    "-c",
    "import orchestra._scripted.scenarios as s\n"
    "call = s._call\n"
    "s._call = lambda name, **a: call(\n"
    "    name, **({**a, 'seconds': 86400.0} if name == 'scan_archive' else a)\n"
    ")\n"
    "from orchestra._cli.main import run; run()",
]
"""The CLI with every scripted ``scan_archive`` call asking for a day-long scan.

A tree run by it cannot finish before it is stopped, however loaded the
machine: a test that stops it never races the tree's own end (with the demo's
3-second scans, a slow start of the cancelling process let the tree complete
first). The patch lives only in that process, on the scripted model's script.
"""


def reap(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` if it still runs, wait for it and close its pipes (no ResourceWarning)."""
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)  # waits; closes stdout and stderr
