"""Model settings on the command line: checked, saved with the tree, shown."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from orchestra import SQLiteStore
from orchestra._cli.main import main


def test_demo_settings_reach_every_run_of_the_tree_and_the_report(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    args = ["demo", "research", "--store", str(store), "--json", "--temperature", "0.3"]
    args += ["--seed", "4", "--stop", "END", "--extra-body", '{"user": "me"}']
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    wanted = {"temperature": 0.3, "seed": 4, "stop": ["END"], "extra_body": {"user": "me"}}
    assert report["settings"] == wanted
    with SQLiteStore(store) as saved:
        tree = saved.tree(report["run_id"])
    assert len(tree) == 4 and all(s.settings and s.settings.saved() == wanted for s in tree)
    shown = CliRunner().invoke(main, ["show", report["run_id"], "--store", str(store)])
    assert 'model settings: temperature 0.3, seed 4, stop ["END"]' in shown.stdout


def test_a_tree_without_settings_saves_none(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "plan", "--store", str(tmp_path / "r.db"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"] is None


def test_bad_settings_are_one_line_each() -> None:
    for args, says in [
        (["--temperature", "3"], "error: temperature must be in [0, 2], got 3.0"),
        (["--extra-body", "[1]"], "a JSON object is needed, got list"),
        (["--extra-body", '{"max_tokens": 9}'], "error: extra_body cannot set max_tokens"),
        (["--stop", "a", "--stop", "b", "--stop", "c", "--stop", "d", "--stop", "e"], "at most 4"),
    ]:
        result = CliRunner().invoke(main, ["demo", "plan", *args])
        assert result.exit_code != 0 and "Traceback" not in result.output
        assert says in result.output, result.output
