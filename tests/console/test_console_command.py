"""``orchestra console`` as a command: what it loads, the errors a user can make,
loopback only, how it stops, and the resume processes it starts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from console_support import ORCHESTRA, Served, stop_console

from orchestra import StateError
from orchestra._stores.sqlite import SQLiteStore
from orchestra.console._launches import Launches
from orchestra.console._server import HOST, bind

PROBE = """
import json, sys
for name in sys.argv[1].split(","):
    if name:
        sys.modules[name] = None  # as if not installed
sys.argv = ["orchestra", *sys.argv[2:]]
from orchestra._cli.main import run
code = 0
try:
    run()
except SystemExit as exc:
    code = exc.code
print("\\nPROBE " + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def probe(*args: str, hidden: str = "") -> tuple[dict[str, Any], str]:
    """The CLI run with ``args`` in a fresh interpreter: its exit code and the modules it
    loaded, and its stderr; ``hidden``: packages (comma-separated) made impossible to import."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, hidden, *args], capture_output=True, text=True, timeout=60
    )
    found: dict[str, Any] = json.loads(done.stdout.rsplit("\nPROBE ", 1)[1])
    return found, done.stderr


def web_stack(found: dict[str, Any]) -> list[str]:
    return [m for m in found["modules"] if m.split(".")[0] in ("starlette", "hypercorn", "anyio")]


@pytest.mark.parametrize("args", [["--help"], ["console", "--help"], ["runs"]])
def test_other_commands_and_the_help_load_no_web_stack(args: list[str]) -> None:
    SQLiteStore().close()  # the default store exists: `runs` reads it
    found, stderr = probe(*args)
    assert found["code"] == 0 and "Traceback" not in stderr, stderr
    assert web_stack(found) == []


def test_without_the_console_extra_it_says_what_to_install() -> None:
    found, stderr = probe("console", "--port", "0", hidden="starlette")
    assert found["code"] == 8
    assert stderr == "error: the console needs starlette: pip install 'orchestra-trees[console]'\n"
    found, stderr = probe("console", "--port", "0", hidden="hypercorn,starlette")
    assert "hypercorn and starlette: pip install" in stderr


def run_console(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCHESTRA, "console", *args], capture_output=True, text=True, timeout=60
    )


def test_a_port_in_use_is_one_line_and_exit_code_8() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_console("--port", str(port), "--create")
    assert done.returncode == 8
    assert done.stderr == f"error: cannot serve on 127.0.0.1:{port}: Address already in use\n"


def test_a_store_that_is_not_a_database_is_one_line_and_exit_code_8(tmp_path: Path) -> None:
    junk = tmp_path / "runs.db"
    junk.write_bytes(b"not a database, not at all" * 100)
    done = run_console("--store", str(junk), "--port", "0")
    assert done.returncode == 8
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_a_bad_port_is_a_usage_error() -> None:
    done = run_console("--port", "70000")
    assert done.returncode == 2 and done.stderr.startswith("error: ")


def test_it_listens_on_loopback_only() -> None:
    sock = bind(0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1"
    finally:
        sock.close()


def test_sigterm_stops_it_with_exit_code_0(console: Served) -> None:
    assert console.url.startswith("http://127.0.0.1:")
    stop_console(console)  # one SIGTERM (a second one, while it stops, would kill it); exit 0
    assert "SIGTERM: stopped\n" in console.said


FAKE_RESUME = """
import pathlib, signal, sys, time
marks = pathlib.Path(sys.argv[1])
marks.write_text(" ".join(sys.argv[2:]))
if sys.argv[-1] == "broken":
    print("error: run broken is leased by someone else", file=sys.stderr)
    sys.exit(8)
def stop(*_):
    marks.write_text("stopped gracefully")
    sys.exit(6)
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""


def fake_resumes(nursery: trio.Nursery, tmp_path: Path) -> tuple[Launches, Path]:
    """Launches whose ``orchestra`` is a script: it notes its arguments, then fails (for the
    run ``broken``) or waits for SIGTERM, which it notes too."""
    marks = tmp_path / "marks.txt"
    command = [sys.executable, "-c", FAKE_RESUME, str(marks)]
    return Launches(nursery=nursery, store_path=tmp_path / "runs.db", command=command), marks


async def until(predicate: Any) -> None:
    """Poll another process's doing (bounded)."""
    for _ in range(3000):
        if predicate():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"not reached within 30 s: {predicate}")


async def test_a_resume_that_fails_keeps_its_error_line(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        launches, _ = fake_resumes(nursery, tmp_path)
        launch = launches.start("broken")
        await launch.ended.wait()
    assert launch.failed and launch.returncode == 8
    assert launch.said == "error: run broken is leased by someone else"


async def test_the_resumes_it_started_stop_gracefully_with_it(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        launches, marks = fake_resumes(nursery, tmp_path)
        launch = launches.start("run_1")
        await until(lambda: marks.exists() and marks.read_text())  # written, not just made
        said = marks.read_text()
        assert said == f"resume --store {tmp_path / 'runs.db'} --json -- run_1"
        with pytest.raises(StateError, match="being resumed already"):
            launches.start("run_1")
        assert launches.get("run_1") is launch and launch.running
        nursery.cancel_scope.cancel()  # what the console does when it stops
    assert marks.read_text() == "stopped gracefully"
