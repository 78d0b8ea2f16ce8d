"""Helpers of the console tests: the console in its own process (``orchestra console
--port 0``), the CLI that makes runs for it, and polling with a deadline."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

ORCHESTRA = [sys.executable, "-m", "orchestra"]


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "",
    seen: Callable[[], object] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something true (bounded by ``timeout``);
    on failure, say ``what`` was awaited and what ``seen`` says there is."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            there = f"; found: {seen()}" if seen is not None else ""
            raise AssertionError(f"not reached within {timeout} s: {what or predicate}{there}")
        time.sleep(0.01)


def cli(*args: str, code: int = 0) -> dict[str, Any]:
    """``orchestra ARGS --json`` in its own process: its JSON, once it exited ``code``."""
    done = subprocess.run(
        [*ORCHESTRA, *args, "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == code, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@attrs.frozen
class Served:
    """A running ``orchestra console``: its URL and its store."""

    url: str
    store: Path
    process: subprocess.Popen[str]
    said: list[str]
    """What it printed on stderr so far, a line each."""
    drain: threading.Thread


def start_console(store: Path, *, create: bool = False) -> Served:
    """``orchestra console`` over ``store`` on a free port, once it accepts requests
    (``create``: over an empty store if there is none yet)."""
    command = [*ORCHESTRA, "console", "--port", "0", "--store", str(store)]
    command += ["--create"] if create else []
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    first = process.stderr.readline()
    said = [first]
    drain = threading.Thread(target=lambda: said.extend(process.stderr or ()), daemon=True)
    drain.start()
    served = Served(url="", store=store, process=process, said=said, drain=drain)
    if "http://" not in first:
        stop_console(served)
        raise AssertionError(f"the console did not start: {first}")
    url = first[first.index("http://") :].split()[0].rstrip("/")
    return attrs.evolve(served, url=url)


def stop_console(served: Served) -> None:
    """SIGTERM, then wait; the console must have exited 0."""
    process = served.process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    served.drain.join(timeout=10)
    if process.stderr is not None:
        process.stderr.close()
    assert process.returncode == 0, "".join(served.said)
