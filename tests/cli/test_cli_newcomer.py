"""What a newcomer trips over, said plainly: a wrong URL fails at once, a
mistyped store is not created, a background run says its id at once, ``runs``
says what an interrupted run waits for, retries are said as they happen."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from cli_processes import ENDLESS, reap
from click.testing import CliRunner

from orchestra._cli.main import main
from orchestra._views.exits import OPERATIONAL

READ_COMMANDS = [
    ["runs"],
    ["show", "run_x"],
    ["trace", "run_x"],
    ["cancel", "run_x"],
    ["approve", "run_x"],
    ["reject", "run_x"],
    ["resume", "run_x"],
]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_run_against_a_closed_port_fails_at_once_naming_it(tmp_path: Path) -> None:
    port = closed_port()
    store = tmp_path / "runs.db"
    url = f"http://127.0.0.1:{port}/v1"
    started = time.monotonic()
    done = subprocess.run(
        [*ENDLESS, "run", "hi", "--base-url", url, "--model", "m", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr  # failed, not "interrupted ... resume later"
    said = " ".join(done.stdout.split())
    assert f"cannot connect to {url}: Connection refused" in said
    assert "retry:" not in done.stderr  # no retry of a server that never answered
    assert took < 10, took  # measured: 0.6 s; it was 10 s then "resume later"


def test_wait_for_server_retries_and_says_each_retry(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    code, stdout, stderr = invoke(
        "run", "hi", "--base-url", url, "--model", "m", "--store", str(tmp_path / "r.db"),
        "--wait-for-server", "1.2", "--json",
    )  # fmt: skip
    retries = [line for line in stderr.splitlines() if line.startswith("retry: ")]
    assert code == 1 and json.loads(stdout)["status"] == "failed"
    assert len(retries) == 2 and all(" in 0.5 s after: cannot connect to " in r for r in retries)


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: a[0])
def test_read_commands_on_a_missing_store_create_nothing(tmp_path: Path, args: list[str]) -> None:
    store = tmp_path / "typo" / "dir" / "x.db"
    code, _, stderr = invoke(*args, "--store", str(store))
    assert code == OPERATIONAL
    assert stderr.splitlines() == [
        f"error: no run store at {store}: no run was saved there (check --store; "
        "`orchestra demo plan` starts one)"
    ]
    assert not (tmp_path / "typo").exists()


def test_runs_says_what_an_interrupted_run_waits_for(tmp_path: Path) -> None:
    store = str(tmp_path / "r.db")
    assert invoke("demo", "destructive", "--store", store)[0] == 6
    assert invoke("demo", "slow", "--cancel-after", "0.2", "--store", store)[0] == 6
    assert invoke("demo", "plan", "--store", store)[0] == 0
    code, stdout, _ = invoke("runs", "--store", store, "--json")
    assert [r["waits_for"] for r in json.loads(stdout)] == [None, "cancelled", "approval"]
    code, stdout, _ = invoke("runs", "--store", store)
    plain = stdout.splitlines()
    assert code == 0 and len(plain) == 4
    assert "interrupted: cancelled" in plain[2] and "interrupted: approval" in plain[3]
    assert "interrupted" not in plain[1]


def test_a_background_demo_says_its_id_at_once_and_is_cancelled_from_another_shell(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "r.db")
    demo = subprocess.Popen(
        [*ENDLESS, "demo", "slow_tree", "--store", store, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stderr is not None
        first = demo.stderr.readline()  # said before the tree ends (it would take a day)
        run_id = first.split()[1]
        assert first == f"run {run_id} started\n"
        assert demo.stderr.readline() == (
            f"  stop it with: orchestra cancel {run_id} --store {store}\n"
        )
        cancelled = subprocess.run(
            [*ENDLESS, "cancel", run_id, "--store", store], capture_output=True, text=True
        )
        assert cancelled.returncode == 0, cancelled.stderr
        out, _ = demo.communicate(timeout=60)
        assert demo.returncode == 6 and json.loads(out)["status"] == "interrupted"
    finally:
        reap(demo)


def test_retries_are_said_as_they_happen_and_words_are_not_redacted(tmp_path: Path) -> None:
    code, stdout, stderr = invoke("demo", "plan+500x2", "--store", str(tmp_path / "r.db"))
    retries = [line for line in stderr.splitlines() if line.startswith("retry: ")]
    assert code == 0 and len(retries) == 2
    assert retries[0].startswith("retry: run run_") and ", attempt 2 in " in retries[0]
    assert all(r.endswith("answered 500: scripted fault: HTTP 500") for r in retries)
    assert "REDACTED" not in stderr + stdout


def test_the_demo_key_is_still_redacted_where_a_server_echoes_it(tmp_path: Path) -> None:
    code, stdout, _ = invoke("demo", "plan+401", "--store", str(tmp_path / "r.db"), "--json")
    reason = json.loads(stdout)["reason"]
    assert code == 1 and "Incorrect API key provided: Bearer [REDACTED]." in reason
    assert "sk-orchestra" not in stdout


def test_dedupe_is_said_in_the_plain_output(tmp_path: Path) -> None:
    code, stdout, _ = invoke("demo", "repeat", "--dedupe", "--store", str(tmp_path / "r.db"))
    assert code == 0
    assert "\ndeduplicated: 1 repeated call answered from the transcript, not run again\n" in stdout
    code, stdout, _ = invoke("demo", "repeat", "--store", str(tmp_path / "r.db"))
    assert code == 0 and "deduplicated" not in stdout
