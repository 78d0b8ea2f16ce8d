"""tools/benchmarks.py: the quick suite writes every section; the pieces it is built on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from orchestra.testing import reply

TOOLS = Path(__file__).resolve().parent.parent.parent / "tools"
SECTIONS = (
    "turn_overhead",
    "concurrency",
    "idle_rss",
    "trees",
    "cancel",
    "persistence",
    "tracing",
    "counting",
    "startup",
)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(TOOLS))
    import bench.common

    return bench


def test_quick_suite_writes_every_section_with_figures_and_targets(tmp_path: Path) -> None:
    out = tmp_path / "report" / "BENCH.md"
    done = subprocess.run(
        [sys.executable, str(TOOLS / "benchmarks.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out.parent / "benchmarks.json").read_text(encoding="utf-8"))
    assert [s["id"] for s in results["sections"]] == list(SECTIONS)
    assert results["quick"] and results["total_s"] > 0
    machine = results["machine"]
    assert machine["cores"] >= 1 and machine["python"] and len(machine["commit"]) >= 7
    for sec in results["sections"]:
        assert sec["error"] is None, sec
        assert sec["rows"], sec["id"]
        for row in sec["rows"]:
            assert row["n"] >= 1 and (row["median"] is not None or row["text"]), row
    targets = [t for s in results["sections"] for t in s["targets"]]
    assert len(targets) == 8
    judged = {t["text"]: t["met"] for t in targets}
    not_judged = [text for text, met in judged.items() if met is None]
    assert not_judged == ["cancel of a 100-run tree with SQLite ≤ 10 ms"]  # absolute ms, 2 repeats
    assert all(isinstance(met, bool) for text, met in judged.items() if text not in not_judged)
    text = out.read_text(encoding="utf-8")
    for i, sec in enumerate(results["sections"], 1):
        assert f"## {i}. {sec['title']}" in text
    assert text.count("\ntarget: ") == 8
    for word in ("| CPU |", "| RAM |", "| Python |", "| OS |", "| commit |", "| date |"):
        assert word in text


def test_a_ratio_pairs_interleaved_samples_else_divides_medians(bench: ModuleType) -> None:
    paired = bench.common.row(
        "x", "ms", [2, 4, 9], baseline="b", baseline_samples=[1, 2, 3], paired=True
    )
    assert (paired["median"], paired["min"], paired["max"], paired["n"]) == (4, 2, 9, 3)
    assert (paired["ratio"], paired["ratio_min"], paired["ratio_max"]) == (2, 2, 3)
    unpaired = bench.common.row("x", "ms", [2, 4, 9], baseline="b", baseline_samples=[1, 3])
    assert unpaired["ratio"] == 2 and unpaired["ratio_min"] is None
    texted = bench.common.row("x", "runs", [5], baseline="b", baseline_samples=[5], text="no")
    assert texted["ratio"] is None


def test_a_failed_section_is_reported_as_not_measured(bench: ModuleType) -> None:
    from bench import report, suite

    results = {
        "command": "python tools/benchmarks.py",
        "quick": False,
        "machine": bench.common.machine(),
        "sections": [suite._failed("cancel", "worker section failed (exit 1)\nTraceback")],
        "total_s": 1.0,
    }
    text = report.markdown(results, "benchmarks.json")
    assert "## 1. Cancel a tree" in text
    assert "**Not measured**: the section failed: `worker section failed (exit 1)`" in text
    assert "| cancel of a 100-run tree with SQLite ≤ 10 ms | not measured" in text


def _calls(model: str, question: str, turn: int = 0) -> list[str] | str:
    messages: list[dict[str, object]] = [{"role": "user", "content": question}]
    messages += [{"role": "assistant", "content": "…"}] * turn
    message = reply({"model": model, "messages": messages})["choices"][0]["message"]
    calls = message.get("tool_calls")
    if not calls:
        return str(message["content"])
    return [
        json.loads(c["function"]["arguments"]).get("question", c["function"]["name"]) for c in calls
    ]


def test_the_tree_scenario_fans_out_in_batches_of_100_then_answers() -> None:
    first = _calls("tree", "[tree 250x10]")
    assert len(first) == 100 and first[0] == "[tree 10] part 0"
    assert _calls("tree", "[tree 250x10]", turn=2)[-1] == "[tree 10] part 249"
    assert _calls("tree", "[tree 250x10]", turn=3) == "250 children answered."
    assert _calls("tree", "[tree 3] [slow]") == [f"[tree ] [slow] part {i}" for i in range(3)]
    assert _calls("tree", "[tree ] part 4") == "leaf: nothing to report."
    assert _calls("tree", "[tree ] [slow] part 4") == ["scan_archive"]
