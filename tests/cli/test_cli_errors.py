"""The command line's one error path: each mistake a person makes ends in one line
``error: …`` on stderr and its documented exit code, never a traceback."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestra._cli.errors import translated
from orchestra._cli.main import main
from orchestra._exceptions import ConfigError, LeaseError, StateError
from orchestra._state import Status
from orchestra._stores.sqlite import SQLiteStore
from orchestra._views.exits import INTERNAL, OPERATIONAL, USAGE, status_exit

ORCHESTRA = [sys.executable, "-m", "orchestra"]


def fails(args: list[str], code: int) -> str:
    """Run the CLI in this process; it must fail with ``code`` and one line ``error: …``."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not _started(line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _started(line: str) -> bool:
    """The notice of a command that started a run (said before it can fail)."""
    started = line.startswith("run run_") and line.endswith(" started")
    return started or line.startswith("  stop it with: orchestra cancel run_")


def demo(*args: str, code: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["demo", *args, "--json"])
    assert result.exit_code == code, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCHESTRA, *args], capture_output=True, text=True, timeout=120, check=False
    )


# -- runs that cannot be resumed, decided or cancelled ----------------------------


@pytest.mark.parametrize(("scenario", "code"), [("plan", 0), ("permanent", 1)])
def test_resume_of_a_finished_run_is_one_line(scenario: str, code: int) -> None:
    report = demo(scenario, code=code)
    line = fails(["resume", report["run_id"]], OPERATIONAL)
    assert line == f"error: run {report['run_id']} ended {report['status']}; it cannot be resumed"


def test_resume_in_a_new_process_is_one_line_too() -> None:
    report = demo("plan")
    done = cli("resume", report["run_id"])
    assert done.returncode == OPERATIONAL and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"error: run {report['run_id']} ended completed; it cannot be resumed"
    ]


def test_debug_shows_the_traceback() -> None:
    report = demo("plan")
    done = cli("--debug", "resume", report["run_id"])
    assert done.returncode != OPERATIONAL
    assert "Traceback" in done.stderr and "cannot be resumed" in done.stderr


def test_resume_of_a_run_another_process_holds(private_store: Path) -> None:
    stopped = demo("destructive", code=6)
    with SQLiteStore(private_store) as store:
        store.acquire_lease(stopped["run_id"], "pid 4242 on another-host", ttl=60)
    line = fails(["resume", stopped["run_id"]], OPERATIONAL)
    assert "another process is running it" in line and "pid 4242 on another-host" in line


def test_resume_of_a_child_names_its_root() -> None:
    report = demo("research")
    child = report["children"][0]["run_id"]
    line = fails(["resume", child], OPERATIONAL)
    assert f"orchestra resume {report['run_id']}" in line


def test_cancel_of_a_run_that_is_not_running() -> None:
    report = demo("plan")
    line = fails(["cancel", report["run_id"]], OPERATIONAL)
    assert line == f"error: run {report['run_id']} is not running: it ended completed"


def test_show_of_an_unknown_run() -> None:
    demo("plan")
    assert "run_nope" in fails(["show", "run_nope"], OPERATIONAL)


def test_approving_then_rejecting_keeps_the_first_decision(private_store: Path) -> None:
    stopped = demo("destructive", code=6)
    assert CliRunner().invoke(main, ["approve", stopped["run_id"]]).exit_code == 0
    assert CliRunner().invoke(main, ["approve", stopped["run_id"]]).exit_code == 0  # same again
    line = fails(["reject", stopped["run_id"], "--reason", "no"], OPERATIONAL)
    assert "was already approved" in line
    with SQLiteStore(private_store) as store:
        state = store.load(stopped["run_id"])
    assert len(state.approvals) == 1 and state.rejections == {}


def test_rejecting_then_approving_keeps_the_first_decision() -> None:
    stopped = demo("destructive", code=6)
    run_id = stopped["run_id"]
    assert CliRunner().invoke(main, ["reject", run_id, "--reason", "keep it"]).exit_code == 0
    assert "was already rejected ('keep it')" in fails(["approve", run_id], OPERATIONAL)
    assert "rejected ('keep it')" in fails(["reject", run_id, "--reason", "other"], OPERATIONAL)


# -- bad options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "plan", "--max-budget", "nan"],
        ["demo", "plan", "--max-budget", "inf"],
        ["demo", "plan", "--max-budget", "1e308"],
        ["demo", "plan", "--max-budget", "-1"],
        ["demo", "plan", "--timeout", "nan"],
        ["demo", "research", "--child-budget", "nan"],
        ["demo", "slow", "--cancel-after", "nan"],
        ["demo", "plan", "--price-in", "nan"],
        ["demo", "plan", "--max-turns", "100000000000000000000000"],
        ["demo", "plan", "--max-tokens-budget", "100000000000000000000000"],
        ["demo", "plan", "--trace", "/nonexistent/dir/run.jsonl"],
        ["demo", "plan", "--bogus"],
        ["demo", "nope"],
        ["resume", "run_x", "--max-budget", "nan"],
        ["resume", "run_x", "--trace", "/nonexistent/dir/run.jsonl"],
        ["run", "task", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--timeout", "nan"],
        ["run", "task", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "rm"],
        ["cancel", "run_x", "--wait", "nan"],
        ["serve-scripted", "--latency-ms", "inf"],
        ["nope"],
    ],
)
def test_a_bad_option_is_a_usage_error(args: list[str]) -> None:
    line = fails(args, USAGE)
    assert "--help'." in line  # where to look


def test_a_range_is_said_in_the_error_and_the_help() -> None:
    line = fails(["demo", "plan", "--max-budget", "1e308"], USAGE)
    assert "0<=x<=1,000,000" in line
    help_text = CliRunner().invoke(main, ["demo", "--help"], terminal_width=80).output
    assert "[0<=x<=1,000,000]" in help_text


def test_an_unwritable_trace_in_a_new_process() -> None:
    done = cli("demo", "plan", "--trace", "/nonexistent/dir/run.jsonl")
    assert done.returncode == USAGE and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "error: Invalid value for '--trace': the directory '/nonexistent/dir' does not exist. "
        "Try 'orchestra demo --help'."
    ]


# -- a corrupt store ----------------------------------------------------------------


def corrupt_data_pages(path: Path) -> None:
    """Overwrite the root pages of the runs and events tables and their indexes
    (the store's header, schema and meta table stay readable, so it opens)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        pages = [
            page
            for (page,) in conn.execute(
                "SELECT rootpage FROM sqlite_master WHERE tbl_name IN ('runs', 'events')"
            )
        ]
    conn.close()
    with path.open("r+b") as f:
        for page in pages:
            f.seek((page - 1) * page_size)
            f.write(b"\xff" * page_size)


@pytest.fixture
def corrupt_store(tmp_path: Path) -> tuple[str, str]:
    store = str(tmp_path / "corrupt.db")
    run_ids = [demo("research", "--store", store)["run_id"] for _ in range(3)]
    corrupt_data_pages(Path(store))
    return store, run_ids[0]


@pytest.mark.parametrize("command", ["runs", "show", "trace", "cancel", "approve", "resume"])
def test_reading_a_corrupt_store_is_one_line(corrupt_store: tuple[str, str], command: str) -> None:
    store, run_id = corrupt_store
    args = [command, "--store", store] if command == "runs" else [command, run_id, "--store", store]
    line = fails(args, OPERATIONAL)
    assert "database disk image is malformed" in line and store in line


def test_saving_to_a_corrupt_store_is_one_line(corrupt_store: tuple[str, str]) -> None:
    store, _ = corrupt_store
    line = fails(["demo", "plan", "--store", store, "--json"], OPERATIONAL)
    assert "database disk image is malformed" in line
    done = cli("demo", "research", "--store", store)
    assert done.returncode == OPERATIONAL and "Traceback" not in done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "database disk image is malformed" in errors[0]


def test_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database\n" * 100)
    assert "notes.db" in fails(["runs", "--store", str(path)], OPERATIONAL)


# -- serve-scripted -----------------------------------------------------------------


def test_serve_scripted_stops_cleanly_on_ctrl_c() -> None:
    server = subprocess.Popen(
        [*ORCHESTRA, "serve-scripted", "--port", "0"], stderr=subprocess.PIPE, text=True
    )
    assert server.stderr is not None
    try:
        assert "scripted provider at http://" in server.stderr.readline()
        server.send_signal(signal.SIGINT)
        rest = server.stderr.read()
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()
        server.stderr.close()
    assert "Traceback" not in rest and "error" not in rest
    assert rest.strip() == "SIGINT: stopped"


def test_serve_scripted_on_a_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = fails(["serve-scripted", "--port", str(port)], OPERATIONAL)
    assert line.startswith(f"error: cannot serve on 127.0.0.1:{port}: ")
    assert "in use" in line


def test_serve_scripted_on_an_invalid_host() -> None:
    line = fails(["serve-scripted", "--host", "999.1.1.1", "--port", "0"], OPERATIONAL)
    assert line.startswith("error: cannot serve on 999.1.1.1:0: ")


# -- the mapping itself ---------------------------------------------------------------


def test_an_unexpected_exception_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str | None) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("orchestra._cli.reads.existing_store", broken)
    line = fails(["runs"], INTERNAL)
    assert line == (
        "error: internal error: RuntimeError('boom') (run again with --debug for the traceback)"
    )


def test_groups_are_unwrapped_to_the_error_they_carry() -> None:
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [LeaseError("held")])])
    error = translated(nested)
    assert (error.message, error.exit_code) == ("held", OPERATIONAL)
    error = translated(ExceptionGroup("two", [ValueError("x"), StateError("gone")]))
    assert (error.message, error.exit_code) == ("gone", OPERATIONAL)
    assert translated(ConfigError("bad")).exit_code == USAGE
    assert translated(KeyboardInterrupt()).exit_code == 130
    error = translated(FileNotFoundError(2, "No such file or directory", "/x/run.jsonl"))
    assert error.message == "/x/run.jsonl: No such file or directory"


def test_every_stopped_status_has_its_documented_code() -> None:
    codes = {s: status_exit(s) for s in Status if s is not Status.RUNNING}
    assert codes == {
        Status.COMPLETED: 0,
        Status.FAILED: 1,
        Status.MAX_TURNS_EXCEEDED: 3,
        Status.BUDGET_EXCEEDED: 4,
        Status.DEADLINE_EXCEEDED: 5,
        Status.INTERRUPTED: 6,
    }
    with pytest.raises(ValueError, match="once stopped"):
        status_exit(Status.RUNNING)


def test_the_docs_table_says_the_same_codes() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "reference" / "exit-codes.md").read_text()
    for code, meaning in [
        (0, "completed"),
        (1, "`failed`"),
        (2, "usage error"),
        (3, "`max_turns_exceeded`"),
        (4, "budget_exceeded"),
        (5, "deadline_exceeded"),
        (6, "interrupted"),
        (OPERATIONAL, "operational error"),
        (INTERNAL, "internal error"),
    ]:
        assert any(
            line.startswith(f"| {code} |") and meaning in line for line in readme.splitlines()
        ), (code, meaning)
