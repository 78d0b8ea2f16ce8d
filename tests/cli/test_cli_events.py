"""``--json-events``: every event of the tree on stdout as JSON lines, deltas included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestra import SQLiteStore
from orchestra._cli.main import main
from orchestra._cli.session import EventLines
from orchestra._events import Event


def test_research_emits_text_deltas_from_the_root_and_each_child(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["demo", "research", "--json-events", "--store", str(tmp_path / "r.db")]
    )
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    *events, report = lines
    assert report["type"] == "report" and report["status"] == "completed"
    runs = {report["run_id"], *(c["run_id"] for c in report["children"])}
    said = {e["run_id"] for e in events if e["type"] == "text_delta"}
    assert said == runs and len(runs) == 4  # the root and its three children
    for run in [report, *report["children"]]:
        text = "".join(
            e["text"] for e in events if e["type"] == "text_delta" and e["run_id"] == run["run_id"]
        )
        assert text.endswith(run["answer"])
    assert all("run_id" in e and "parent_id" in e for e in events)
    depths = {e["run_id"]: e["depth"] for e in events}
    assert depths[report["run_id"]] == 0
    assert all(depths[c["run_id"]] == 1 for c in report["children"])


def test_a_run_first_seen_without_its_parent_has_its_depth_from_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_path = tmp_path / "r.db"
    ran = CliRunner().invoke(main, ["demo", "research", "--json", "--store", str(store_path)])
    report = json.loads(ran.stdout)
    child = report["children"][0]["run_id"]
    lines = EventLines(SQLiteStore(str(store_path)))  # as after a resume: no parent seen
    lines(
        Event(
            type="text_delta",
            run_id=child,
            root_id=report["run_id"],
            parent_id=report["run_id"],
            at=0.0,
        )
    )
    lines(
        Event(type="run_started", run_id="run_unknown", root_id="r", parent_id="run_gone", at=0.0)
    )
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["run_id"], first["depth"]) == (child, 1)
    assert second["depth"] == 1  # an unknown parent counts as a root
