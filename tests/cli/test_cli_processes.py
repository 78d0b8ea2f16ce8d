"""The CLI across real processes: approval and resume, cancel from outside, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_processes import ENDLESS, reap

from orchestra import Status
from orchestra._stores.sqlite import SQLiteStore

ORCHESTRA = [sys.executable, "-c", "from orchestra._cli.main import run; run()"]


def cli(*args: str, check: int | None = 0) -> dict[str, Any]:
    done = subprocess.run(
        [*ORCHESTRA, *args, "--json"], capture_output=True, text=True, timeout=120
    )
    if check is not None:
        if done.returncode != check:
            print(done.stdout)  # the report says which run did not end as asked
        assert done.returncode == check, done.stderr
    return json.loads(done.stdout)


def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    """Poll the store for a condition set by another process; at ``timeout``, fail
    naming ``what`` was awaited. 60 s: a CLI process's start takes 1-2 s idle and
    several times that on a loaded 2-core machine; the wait ends as soon as it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_destructive_approve_and_resume_in_new_processes(tmp_path: Path) -> None:
    sandbox = tmp_path / "box"
    stopped = cli("demo", "destructive", "--dir", str(sandbox), check=6)
    assert stopped["status"] == "interrupted"
    waiting = stopped["interruption"]
    assert (waiting["kind"], waiting["tool"], waiting["arguments"]) == (
        "approval",
        "delete_file",
        {"path": "access.log"},
    )
    assert (sandbox / "access.log").exists()
    cli("approve", stopped["run_id"])
    done = cli("resume", stopped["run_id"])
    assert done["status"] == "completed"
    assert done["answer"] == "Deleted access.log to free space."
    assert done["turns"] == 3 and done["tool_runs"] == 2
    assert done["cost_usd"] > stopped["cost_usd"]
    assert not (sandbox / "access.log").exists()
    with pytest.raises(AssertionError):
        cli("resume", stopped["run_id"])  # completed: refused, nothing runs twice


def test_destructive_reject_deletes_nothing(tmp_path: Path) -> None:
    sandbox = tmp_path / "box"
    stopped = cli("demo", "destructive", "--dir", str(sandbox), check=6)
    cli("reject", stopped["run_id"], "--reason", "keep it")
    done = cli("resume", stopped["run_id"])
    assert (sandbox / "access.log").exists()
    assert "nothing was deleted" in done["answer"] and "keep it" in done["answer"]


def _running_tree(store: SQLiteStore, in_tool: int) -> str | None:
    roots = store.list_runs(limit=1)
    if not roots or roots[0].status is not Status.RUNNING:
        return None
    started = [e for e in store.events(root_id=roots[0].run_id) if e["type"] == "run_started"]
    return roots[0].run_id if len(started) >= in_tool else None


def _slow_tree_running(
    store_path: Path, *, endless: bool = False
) -> tuple[subprocess.Popen[str], SQLiteStore, str]:
    """``orchestra demo slow_tree`` in its own process, once its whole tree is running.

    ``endless``: its scans never end on their own (:data:`ENDLESS`).
    """
    runner = subprocess.Popen(
        [*(ENDLESS if endless else ORCHESTRA), "demo", "slow_tree", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        store = SQLiteStore(store_path)
        return (
            runner,
            store,
            wait_for(lambda: _running_tree(store, 4), "the slow_tree's 4 runs started"),
        )
    except BaseException:
        reap(runner)
        raise


def test_orchestra_cancel_stops_a_tree_in_another_process(private_store: Path) -> None:
    runner, store, root = _slow_tree_running(private_store, endless=True)
    try:
        told = cli("cancel", root, "--reason", "from another shell")
        assert told["status"] == "interrupted"
        # the tree's process polls for cancels every 50 ms: 1 s is 20 polls of margin
        # for a loaded machine (measured: tens of ms idle)
        assert told["stopped_after_ms"] < 1000
        out, _ = runner.communicate(timeout=30)
    finally:
        reap(runner)
    assert runner.returncode == 6
    assert json.loads(out)["reason"] == "from another shell"
    tree = store.tree(root)
    assert len(tree) == 4
    assert all(s.status is Status.INTERRUPTED and s.reason == "from another shell" for s in tree)


def test_first_ctrl_c_stops_the_tree_gracefully(private_store: Path) -> None:
    runner, store, root = _slow_tree_running(private_store, endless=True)
    try:
        runner.send_signal(signal.SIGINT)
        out, err = runner.communicate(timeout=30)
    finally:
        reap(runner)
    assert runner.returncode == 6
    report = json.loads(out)
    assert report["status"] == "interrupted" and report["reason"] == "interrupted by SIGINT"
    assert "again to exit at once" in err
    assert all(s.status is Status.INTERRUPTED for s in store.tree(root))


def test_cancel_after_stops_the_slow_tool_on_time() -> None:
    report = cli("demo", "slow", "--cancel-after", "1.2", check=6)
    assert report["status"] == "interrupted"
    assert report["interruption"]["kind"] == "cancelled"
    assert 1200 <= report["command_elapsed_ms"] < 2000  # measured: 1201-1215 ms on an idle machine


def test_store_location_comes_from_the_environment(private_store: Path) -> None:
    cli("demo", "plan")
    assert private_store.exists()
    assert os.environ["ORCHESTRA_STORE"] == str(private_store)


def _killed_slow_tree(private_store: Path) -> tuple[SQLiteStore, str]:
    """``demo slow_tree --children 3`` killed with SIGKILL while its children run."""
    runner, store, root = _slow_tree_running(private_store)
    try:
        runner.send_signal(signal.SIGKILL)
    finally:
        reap(runner)
    assert runner.returncode == -signal.SIGKILL
    assert all(s.status is Status.RUNNING for s in store.tree(root))
    return store, root


def test_kill_9_during_a_fan_out_then_resume_completes_the_same_tree(private_store: Path) -> None:
    store, root = _killed_slow_tree(private_store)
    children = set(store.load(root).children.values())
    assert len(children) == 3  # bound to their calls before they started
    done = cli("resume", root)
    assert done["status"] == "completed"
    assert {c["run_id"] for c in done["children"]} == children  # re-attached, none new
    listed = cli("runs", "--all")
    assert not [r for r in listed if r["status"] == "running"]
    tree = store.tree(root)
    assert len(tree) == 4 and all(s.status is Status.COMPLETED for s in tree)
    own = sum(s.own.cost_pico for s in tree)
    assert store.load(root).tree.cost_pico == own
    assert done["tree_cost_usd"] == round(own / 10**12, 9)


def test_cancel_of_a_tree_whose_process_died_stops_it_and_leaves_nothing_armed(
    private_store: Path,
) -> None:
    store, root = _killed_slow_tree(private_store)
    told = cli("cancel", root, "--reason", "the box rebooted")
    assert told["status"] == "interrupted" and len(told["stopped"]) == 4
    assert "no process was running it" in told["note"]
    assert all(s.status is Status.INTERRUPTED for s in store.tree(root))
    assert store.pending_cancels(root) == {}
    done = cli("resume", root)  # not stopped at once by a leftover request
    assert done["status"] == "completed"
