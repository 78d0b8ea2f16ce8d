"""``runs`` names each run's model, ``show`` each run's of the tree (``--json`` too)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from orchestra._cli.main import main

NARROW = {"COLUMNS": "80", "NO_COLOR": "1"}


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), env=NARROW)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_runs_and_show_name_the_models(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    root = json.loads(cli("demo", "research", "--store", store, "--json"))
    assert root["model"] == "research"
    assert [child["model"] for child in root["children"]] == ["researcher"] * 3
    listed = cli("runs", "--store", store).splitlines()
    assert listed[0].split() == ["run", "agent", "model", "status", "turns", "own", "$", "tree",
                                 "$", "age"]  # fmt: skip
    assert listed[1].split()[:4] == [root["run_id"][:12], "assistant", "research", "completed"]
    everything = cli("runs", "--all", "--store", store, "--json")
    assert sorted(r["model"] for r in json.loads(everything)) == ["research"] + ["researcher"] * 3
    shown = cli("show", root["run_id"][:12], "--store", store).splitlines()
    assert shown[0].split()[:2] == ["run", "model"]
    rows = [line.split(" run_", 1)[1].split() for line in shown if " run_" in line]
    assert [row[1] for row in rows] == ["research", "researcher", "researcher", "researcher"]
    assert (
        json.loads(cli("show", root["run_id"], "--store", store, "--json"))["model"] == "research"
    )
