"""``approve|reject|grant RUN --resume``: decide and go on with the tree in one step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
from click.testing import CliRunner, Result

from orchestra._cli.main import main
from orchestra._stores.sqlite import SQLiteStore
from orchestra._views.exits import OPERATIONAL

INTERRUPTED = 6


def cli(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == code, (result.output, result.exception)
    return result


def waiting(scenario: str, store: str, *args: str) -> dict[str, Any]:
    said = cli("demo", scenario, *args, "--store", store, "--json", code=INTERRUPTED).stdout
    report: dict[str, Any] = json.loads(said)
    return report


def test_approve_resume_runs_the_call_and_reports_the_tree(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    stopped = waiting("destructive", store)
    shown = cli("show", stopped["run_id"], "--store", store).stdout
    assert "(or decide and resume at once: add --resume)" in shown
    done = cli("approve", stopped["run_id"][:12], "--resume", "--store", store, "--json")
    report = json.loads(done.stdout)  # stdout: the resumed tree's report, as `resume --json`
    assert report["run_id"] == stopped["run_id"] and report["status"] == "completed"
    assert [(d["decision"], d["done"]) for d in report["decisions"]] == [("approved", True)]
    assert not (Path(stopped["dir"]) / "access.log").exists()  # the approved call ran
    assert 'approve: delete_file {"path": "access.log"} (call call_1_0 in run ' in done.stderr


def test_reject_resume_tells_the_model_and_prints_the_tree(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    stopped = waiting("destructive", store)
    done = cli("reject", stopped["run_id"], "--reason", "keep it", "--resume", "--store", store)
    lines = done.stdout.splitlines()
    assert lines[0].startswith('reject: delete_file {"path": "access.log"} (call call_1_0 ')
    assert lines[1].split()[:2] == ["run", "model"]  # then the tree, as `resume` prints it
    assert "stopped: completed" in done.stdout and "next: orchestra resume" not in done.stdout
    assert "rejected  delete_file" in done.stdout and "keep it" in done.stdout
    assert (Path(stopped["dir"]) / "access.log").exists()


def test_grant_resume_goes_on_with_the_raised_limit(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    asking = ("--child-budget", "0.004", "--on-limit", "ask")
    stopped = waiting("research_runaway", store, *asking)
    asked = stopped["interruption"]
    args = ["grant", stopped["run_id"][:12], "--usd", "0.003", "--resume", "--store", store]
    report = json.loads(cli(*args, "--json", code=INTERRUPTED).stdout)  # a runaway: asks again
    child = next(c for c in report["children"] if c["run_id"] == asked["run_id"])
    granted = [(d["call_id"], d["decision"], d["done"]) for d in child["decisions"]]
    assert granted[0] == (asked["call_id"], "approved", True)  # it went on with the grant
    assert report["interruption"]["call_id"] != asked["call_id"]


def test_a_tree_this_process_cannot_resume_is_refused_before_anything_is_decided(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    stopped = waiting("destructive", store)
    with SQLiteStore(store) as saved:  # as if started from Python: no recipe to rebuild it
        saved.update(stopped["run_id"], lambda state: attrs.evolve(state, metadata={}))
    refused = cli("approve", stopped["run_id"], "--resume", "--store", store, code=OPERATIONAL)
    assert "was not started by the orchestra CLI" in refused.stderr
    shown = json.loads(cli("show", stopped["run_id"], "--store", store, "--json").stdout)
    assert [d["decision"] for d in shown["decisions"]] == ["waiting"]
