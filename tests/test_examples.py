"""Every claim in examples/ holds: each script exits 0 and its table says what it claims.

The examples run as subprocesses (``python examples/NAME.py``), all against
the scripted provider on loopback. Those that measure time (Stop, latency, a
tree cancel) run alone; the others two at a time, so the whole module takes
well under a minute. Each test then reads the facts off the printed table.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMED = ("stop", "latency", "cancel_tree", "remote_agent")
"""Examples that measure wall time: each runs with nothing else of ours beside it."""
UNTIMED = (
    "crash_resume",
    "runaway_bill",
    "zero_overshoot",
    "error_policies",
    "permanent_error",
    "dedupe",
    "write_gate",
    "approval",
    "approval_resume",
    "research_budgets",
    "mcp_research",
    "wind_down",
    "fastapi_app",
    "reconcile",
    "top_up",
    "stream_words",
)
NEED_A_SERVICE = ("research_trace", "six_tasks", "local_tree", "distributed_tree")
"""Examples that need Jaeger, a local model server or PostgreSQL: not run here
(tests/distributed/test_example.py runs distributed_tree)."""
SERVERS = ("mcp_files",)
"""Not claims: servers other examples and tests start (tests/mcp drives mcp_files)."""
TIMEOUT_S = 120.0


@attrs.frozen
class Ran:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def row(self, start: str) -> list[str]:
        """The cells (split on whitespace) of the one line starting with ``start``."""
        found = [line for line in self.lines if line.startswith(start)]
        assert len(found) == 1, (start, self.out)
        return found[0].split()


def run_example(name: str) -> Ran:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=EXAMPLES.parent,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def ran() -> dict[str, Ran]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(UNTIMED, pool.map(run_example, UNTIMED), strict=True))
    for name in TIMED:
        results[name] = run_example(name)
    return results


@pytest.fixture(params=[*UNTIMED, *TIMED])
def example(request: pytest.FixtureRequest, ran: dict[str, Ran]) -> tuple[str, Ran]:
    return request.param, ran[request.param]


def usd(cell: str) -> float:
    return float(cell.removeprefix("$"))


def number(cell: str) -> int:
    return int(cell.replace(",", ""))


# -- every example -----------------------------------------------------------------------


def test_every_example_is_run_here_or_needs_a_service() -> None:
    scripts = {p.stem for p in EXAMPLES.glob("*.py")}
    assert scripts == {*UNTIMED, *TIMED, *NEED_A_SERVICE, *SERVERS}


def test_exits_0_with_a_table_in_80_columns(example: tuple[str, Ran]) -> None:
    name, ran = example
    assert ran.code == 0, f"{name} exited {ran.code}\n{ran.out}\n{ran.err}"
    assert ran.lines, name
    assert max(map(len, ran.lines)) <= 80, name
    assert "CLAIM FAILED" not in ran.out


@pytest.mark.parametrize("name", [*UNTIMED, *TIMED])
def test_docstring_says_what_it_shows_and_how_to_run_it(name: str) -> None:
    text = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    docstring = text.split('"""')[1]
    assert docstring.startswith("Claim: ")
    assert f"python examples/{name}.py" in docstring
    assert "orchestra._" not in text, "examples use the public API"


# -- each claim ---------------------------------------------------------------------------


def test_runaway_bill_grows_quadratically(ran: dict[str, Ran]) -> None:
    r = ran["runaway_bill"]
    costs = {}
    for cap in (8, 20, 50, 100):
        cells = r.row(f"{cap:>5} ")
        assert number(cells[1]) == cap and cells[-1] == "max_turns_exceeded"
        costs[cap] = usd(cells[4])
    assert 3.0 < costs[100] / costs[50] < 4.5
    match = re.search(r"([\d.]+)x input tokens, ([\d.]+)x cost", r.out)
    assert match and float(match[2]) == pytest.approx(costs[100] / costs[50], abs=0.06)


def test_zero_overshoot_every_budget_row_within(ran: dict[str, Ran]) -> None:
    r = ran["zero_overshoot"]
    rows = [line.split() for line in r.lines if re.match(r"\s+0\.\d{3} ", line)]
    assert len(rows) == 3
    for budget, turns, spent, left, within, status in rows:
        assert usd(spent) <= usd(budget) and usd(left) >= 0
        assert (within, status) == ("yes", "budget_exceeded")
        assert int(turns) >= 1
    assert [int(row[1]) for row in rows] == sorted(int(row[1]) for row in rows)


def test_error_policies_recover_give_up_or_fail(ran: dict[str, Ran]) -> None:
    r = ran["error_policies"]
    assert r.row("detailed (default)")[2:5] == ["completed", "4", "3"]
    assert r.row("generic")[1:4] == ["completed", "2", "1"]
    assert r.row("fatal_errors")[1:4] == ["failed", "1", "1"]
    assert "->   errors.log mentions a timeout" in r.out
    assert "saw: Error: something failed." in r.out


def test_permanent_error_fails_at_once(ran: dict[str, Ran]) -> None:
    r = ran["permanent_error"]
    assert r.row("default ")[1:4] == ["failed", "1", "1"]
    assert r.row("permanent_errors=()")[1:4] == ["no_progress", "3", "3"]
    assert r.row("  + no_progress_after=None")[2:5] == ["max_turns_exceeded", "20", "20"]
    assert usd(r.row("default ")[4]) < usd(r.row("permanent_errors=()")[4])


def test_dedupe_runs_the_tool_once_less(ran: dict[str, Ran]) -> None:
    r = ran["dedupe"]
    off, on = r.row("off "), r.row("on ")
    assert off[1:5] == ["completed", "3", "2", "2"]
    assert on[1:5] == ["completed", "3", "1", "1"]
    assert "same answer: yes" in r.lines


def test_write_gate_dedupes_reads_only(ran: dict[str, Ran]) -> None:
    r = ran["write_gate"]
    assert r.row("no cache")[2:] == ["2", "1", "2", "deleted", "deleted", "yes"]
    assert r.row("naive cache")[3:] == ["1", "1", "1", "ON", "DISK", "deleted", "NO:", "lie"]
    assert r.row("orchestra dedupe")[2:] == ["1", "1", "2", "deleted", "deleted", "yes"]


def test_approval_decisions_reach_the_model_in_words(ran: dict[str, Ran]) -> None:
    r = ran["approval"]
    assert r.row("approve")[1:] == ["interrupted/approval", "completed", "deleted", "yes"]
    for decision in ("reject, with a reason", "reject, no reason"):
        assert r.row(decision)[-4:] == ["interrupted/approval", "completed", "left", "yes"]
    assert "a silent rejection policy is refused: rejection_text must be" in r.out
    assert "saw: 'Rejected by the user: keep it for the incident review'" in r.out
    assert "saw: 'The user declined this call; nothing was done.'" in r.out


def test_approval_resume_deletes_only_after_approval(ran: dict[str, Ran]) -> None:
    r = ran["approval_resume"]
    exists = [line for line in r.lines if line.startswith("access.log exists:")]
    assert exists == ["access.log exists: True", "access.log exists: False"]
    assert "process 2: completed, turns=3" in r.out


def test_crash_resume_costs_the_same_as_no_crash(ran: dict[str, Ran]) -> None:
    r = ran["crash_resume"]
    killed, resumed = r.row("process 1 (killed)"), r.row("process 2 (resumed)")
    both, uncrashed = r.row("both"), r.row("uncrashed run")
    assert (killed[4], killed[5], killed[7]) == ("2", "2", "running")
    assert killed[3] != resumed[3]  # two processes
    assert (resumed[4], resumed[5], resumed[7]) == ("3", "2", "completed")
    assert both[1:4] == uncrashed[2:5] == ["5", "4", uncrashed[4]]
    assert usd(both[3]) == usd(uncrashed[4]) == pytest.approx(usd(killed[6]) + usd(resumed[6]))
    assert "final cost identical to the uncrashed run: yes" in r.lines


def test_reconcile_pays_once_and_asks_nobody(ran: dict[str, Ran]) -> None:
    r = ran["reconcile"]
    hooked, unhooked = r.row("reconcile hook"), r.row("no hook")
    assert hooked[2:] == ["1", "completed", "-", "no"]  # paid once, settled by the hook
    assert unhooked[2:] == ["1", "interrupted", "unknown_outcome", "yes"]  # as before: a human


def test_stop_ends_the_run_within_milliseconds(ran: dict[str, Ran]) -> None:
    r = ran["stop"]
    unstopped, stopped = r.row("no Stop"), r.row("Stop at 1.2 s")
    assert unstopped[-2] == "completed" and float(unstopped[3]) >= 3.0
    pressed, ended, gap = float(stopped[4]), float(stopped[6]), float(stopped[8])
    assert 1.2 <= pressed < 1.3 and 0 <= gap < 100 and ended - pressed < 0.1
    assert stopped[-2] == "interrupted" and 0 < usd(stopped[-1]) < usd(unstopped[-1])


def test_latency_harness_share(ran: dict[str, Ran]) -> None:
    r = ran["latency"]
    for latency in (0, 100, 500):
        cells = r.row(f"{latency:>10} ")
        calls, wall, waiting, harness = int(cells[1]), *map(float, cells[2:5])
        assert calls == 3 and waiting == calls * latency
        assert wall >= waiting and harness == pytest.approx(wall - waiting, abs=0.11)
        assert 0 <= harness < 50 * calls


def test_research_budgets_every_run_within_its_budget(ran: dict[str, Ran]) -> None:
    r = ran["research_budgets"]
    rows = [line.split() for line in r.lines if line.startswith("  ")]
    assert len(rows) == 5  # three children, then two
    for cells in rows:
        spent, budget, within = usd(cells[-3]), usd(cells[-2]), cells[-1]
        assert spent <= budget == 0.01 and within == "yes"
    assert sum("budget_exceeded" in cells for cells in rows) == 1
    totals = [line.split() for line in r.lines if "(root + children)" in line]
    assert len(totals) == 2
    assert all(usd(t[-3]) <= usd(t[-2]) == 0.05 and t[-1] == "yes" for t in totals)
    assert r.lines.count("tree total = root own + children, to the pico-dollar: yes") == 2


def test_cancel_tree_stops_every_run(ran: dict[str, Ran]) -> None:
    match = re.search(
        r"(\d+) runs stopped ([\d.]+) ms after one cancel\(\); (\d+) interrupted",
        ran["cancel_tree"].out,
    )
    assert match, ran["cancel_tree"].out
    assert match[1] == match[3] == "21" and float(match[2]) < 100


def test_mcp_research_children_work_through_mcp_tools(ran: dict[str, Ran]) -> None:
    r = ran["mcp_research"]
    rows = [line.split() for line in r.lines if " completed " in line and "tree:" not in line]
    assert len(rows) == 3
    assert all(row[-4] == "3" and row[-3] == "2" for row in rows)  # 3 turns, 2 MCP tool runs
    assert "tree: completed" in r.out


def test_top_up_asks_grants_and_completes_within_the_roots_budget(ran: dict[str, Ran]) -> None:
    r = ran["top_up"]
    assert r.row("children that asked for more")[-1] == "3"
    assert r.row("  granted by the root policy")[-1] == "3"
    assert int(r.row("  granted by a person")[-1]) >= 1
    assert r.row("tree ")[-1] == "completed"
    assert r.row("  children completed")[-1] == "3/3"
    spent, budget = (float(x) for x in r.row("  tree spend / root budget")[-3::2])
    assert spent <= budget


def test_stream_words_reads_the_roots_words_as_they_arrive(ran: dict[str, Ran]) -> None:
    words = ran["stream_words"]
    assert int(words.row("pieces of the answer")[-1]) > 1
    first, stopped = words.row("first word after")[-2], words.row("tree stopped after")[-2]
    assert int(first) < int(stopped)
    assert words.err.startswith("Findings: 1) errors.log says:")


def test_remote_agent_runs_within_its_carve_and_stops_with_its_caller(ran: dict[str, Ran]) -> None:
    remote = ran["remote_agent"]
    assert remote.row("team budget (carve)")[3] == "$0.0060"
    spent, charged = remote.row("team tree spent")[3], remote.row("lead charged for")[-1]
    assert spent == charged and float(spent[1:]) <= 0.006
    stopped = remote.row("team stopped after")
    assert int(stopped[3]) < 500 and stopped[5:] == ["['interrupted']"]
