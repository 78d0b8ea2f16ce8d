"""tools/load_test.py at small scale: every run gets a status, nothing leaks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest

TOOL = Path(__file__).parent.parent / "tools" / "load_test.py"


@pytest.fixture(scope="module")
def load_test() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load_test", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["load_test"] = module  # attrs and dataclasses look their module up
    spec.loader.exec_module(module)
    return module


async def test_fifty_runs_half_faulted_all_end_with_a_status_and_leak_nothing(
    load_test: ModuleType, autojump_clock: Any
) -> None:
    report = await load_test.load_test(
        runs=50, fault_rate=0.5, seed=1, timeout=2.0, server_in="inprocess"
    )
    assert report.ok, report
    assert not report.problems
    assert report.fds_after <= report.fds_before and report.tasks_after <= report.tasks_before
    assert report.connections_after_close == 0
    assert sum(report.by_cause.values()) == 50 and report.faulted == 25
    causes = "\n".join(report.by_cause)
    assert "401  failed: model call failed" in causes
    assert "500x20  interrupted/provider_unavailable" in causes
    assert "hangx20  interrupted/provider_unavailable" in causes
    assert {"HTTP 429", "HTTP 500", "ReadTimeout", "ReadError"} <= set(report.retries)


def test_a_leak_or_a_run_without_status_fails_the_report(load_test: ModuleType) -> None:
    fields = {a.name: 0 for a in attrs.fields(load_test.Report)} | {"fd_limit": (1024, 4096)}
    clean = load_test.Report(
        **{**fields, "providers": "per-run", "server": "inprocess", "by_cause": {}}
        | {"retries": {}, "events": {}, "problems": []}
    )
    assert clean.ok
    assert not attrs.evolve(clean, fds_after=1).ok
    assert not attrs.evolve(clean, tasks_after=1).ok
    assert not attrs.evolve(clean, connections_after_close=1).ok
    assert not attrs.evolve(clean, problems=["run 3 (plan): still running"]).ok
