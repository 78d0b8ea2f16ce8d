"""tools/benchmarks.py: the quick suite writes every section; the pieces it is built on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
"""The sections the quick suite test runs: all but ``scaleout``, which starts
PostgreSQL and worker processes (minutes on 2 cores; see its own tests below)."""


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(TOOLS))
    import bench.common

    return bench


def test_quick_suite_writes_every_section_with_figures_and_targets(tmp_path: Path) -> None:
    out = tmp_path / "report" / "BENCH.md"
    done = subprocess.run(
        [
            *(sys.executable, str(TOOLS / "benchmarks.py"), "--quick", "--out", str(out)),
            *("--only", ",".join(SECTIONS)),
        ],
        capture_output=True,
        text=True,
        # a hang guard only: about 40 s idle, minutes on a loaded machine; each
        # section is bounded by the suite itself (120 s in quick mode)
        timeout=120 * len(SECTIONS),
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
    assert len(targets) == 9
    judged = {t["text"]: t["met"] for t in targets}
    not_judged = [text for text, met in judged.items() if met is None]
    assert sorted(not_judged) == [  # absolute times, 2 repeats
        "cancel of a 100-run tree with SQLite ≤ 10 ms",
        "import and build ≤ 150 ms",
    ]
    assert all(isinstance(met, bool) for text, met in judged.items() if text not in not_judged)
    text = out.read_text(encoding="utf-8")
    for i, sec in enumerate(results["sections"], 1):
        assert f"## {i}. {sec['title']}" in text
    assert text.count("\ntarget: ") == 9
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


def test_cpu_seconds_are_read_from_proc(bench: ModuleType) -> None:
    from bench import scaleout

    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    spinner = subprocess.Popen([sys.executable, "-c", spin + "time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while bench.common.cpu_seconds(spinner.pid) < 0.25:  # polled: a loaded machine is slow
            assert time.monotonic() < deadline, "the child never spent 0.25 s of CPU"
            time.sleep(0.05)
        assert bench.common.tree_cpu_seconds(os.getpid()) >= 0.25  # its CPU counts in ours
    finally:
        spinner.kill()
        spinner.wait()
    assert bench.common.cpu_seconds(spinner.pid) == 0.0  # gone
    assert scaleout.machine_busy_seconds() > 0


def test_update_keeps_the_other_sections_and_says_when_each_was_measured(
    bench: ModuleType, tmp_path: Path
) -> None:
    from bench import report, suite

    machine = bench.common.machine()
    old_machine = {**machine, "date": "2026-01-01 00:00 UTC", "commit": "0" * 40}
    earlier = {
        "command": "python tools/benchmarks.py",
        "machine": old_machine,
        "sections": [
            bench.common.section(sid, suite.TITLES[sid], "", []) for sid in ("trees", "scaleout")
        ],
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(earlier), encoding="utf-8")
    kept = suite._kept(path, ["scaleout"])
    assert [s["id"] for s in kept] == ["trees"]
    assert kept[0]["measured"]["commit"] == "0" * 40
    results = {"command": "x", "quick": True, "machine": machine, "sections": kept}
    suite._place(results, {**bench.common.section("startup", "CLI start-up", "", [])})
    assert [s["id"] for s in results["sections"]] == ["trees", "startup"]
    text = report.markdown({**results, "total_s": 1.0}, "benchmarks.json")
    assert "kept from earlier runs (each says when it was measured): Trees." in text
    assert "Measured separately: 2026-01-01 00:00 UTC, commit `000000000000`" in text
