"""``--json-events``: every event of the tree on stdout as JSON lines, deltas included."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from orchestra._cli.main import main


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
