"""What people see: the tree and the runs table at 80 columns, colour only on a
terminal, children in call order, the whole story of a run in ``show``, and the
live view's records."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestra import Agent, Limits, RunResult, catalog
from orchestra._cli.main import main
from orchestra._cli.session import Session, _live_view
from orchestra._events import Event
from orchestra._recipes.recipe import Recipe
from orchestra._stores.memory import MemoryStore
from orchestra._stores.sqlite import SQLiteStore
from orchestra._views.live import LiveTree
from orchestra._views.printed import print_tree, print_waiting
from orchestra._views.report import report, with_stored_children
from orchestra._views.text import Node, tree_lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PLAIN = {"COLUMNS": "80", "NO_COLOR": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None}


def cli(*args: str, env: dict[str, str | None] | None = None, code: int | None = None) -> str:
    result = CliRunner().invoke(main, list(args), env={**PLAIN, **(env or {})})
    if code is not None:
        assert result.exit_code == code, result.output
    return result.stdout


def words(text: str) -> str:
    """``text`` with every run of whitespace one space (wrapped lines joined)."""
    return " ".join(text.split())


def demo_json(*args: str) -> dict:
    return json.loads(cli("demo", *args, "--json"))


def assert_fits(text: str, width: int = 80) -> None:
    for line in ANSI.sub("", text).splitlines():
        assert len(line) <= width, f"{len(line)} > {width}: {line!r}"


def assert_no_token_broken(narrow: str, wide: str) -> None:
    """Every word of the narrow output is a word of the wide one, or the start
    of one cut with an ellipsis: nothing was wrapped mid-word."""
    words = set(wide.split())
    for word in narrow.split():
        if word.endswith("…"):
            assert any(w.startswith(word[:-1]) for w in words), word
        else:
            assert word in words, word


# -- 80 columns -------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["research", "deep"])
def test_runs_and_show_of_a_tree_fit_80_columns(scenario):
    root = demo_json(scenario, "--max-budget", "0.5", "--max-tokens-budget", "90000")["run_id"]
    for command in (["runs"], ["runs", "--all"], ["show", root]):
        narrow = cli(*command, code=0)
        wide = cli(*command, env={"COLUMNS": "300"}, code=0)
        assert_fits(narrow)
        assert_no_token_broken(narrow, wide)
        assert root[:12] in narrow


def test_the_tree_names_status_turns_spend_and_budgets():
    report = demo_json("research", "--max-budget", "0.5", "--max-tokens-budget", "90000")
    shown = cli("show", report["run_id"], code=0)
    lines = shown.splitlines()
    # at 80 columns own $ gives way first (tree $ says the spend): the names stay whole
    assert lines[0].split() == ["run", "model", "status", "turns", "tree", "$", "tokens"]
    wide = cli("show", report["run_id"], env={"COLUMNS": "120"}, code=0).splitlines()
    header = ["run", "model", "status", "turns", "own", "$", "tree", "$", "tokens"]
    assert wide[0].split() == header
    root = lines[1].split()
    turns = str(report["turns"])
    assert root[:5] == ["assistant", report["run_id"][:12], "research", "completed", turns]
    assert "/$0.50" in lines[1] and "/90k" in lines[1]
    child_rows = [line for line in lines if "researcher run_" in line]
    assert len(child_rows) == 3 and "/$0.05" in child_rows[0]
    assert child_rows[0].startswith("├─ ") and child_rows[-1].startswith("└─ ")
    assert f"answer: {report['answer'][:40]}" in shown
    left = round(0.5 - report["tree_cost_usd"], 4)
    assert f"spent ${report['tree_cost_usd']:.4f} of $0.50 (${left:.4f} left)" in shown
    assert "stopped: completed (answered) after " in shown


def test_the_demos_tree_and_the_runs_table_keep_agent_names_whole_at_80_columns():
    """Columns give way (own $, tokens, the model; the runs' age) before a name is cut."""
    printed = cli("demo", "research", code=0)
    assert_fits(printed)
    assert sum("─ researcher run_" in line for line in printed.splitlines()) == 3, printed
    listed = cli("runs", code=0)
    assert_fits(listed)
    assert all(" assistant " in line for line in listed.splitlines()[1:]), listed


def test_a_narrow_tree_cuts_the_agent_name_before_the_run_id():
    leaf = Node(
        agent="a-researcher-with-a-very-long-name",
        run_id="run_0123456789abcdef",
        status="max_turns_exceeded",
        turns=12,
        cost_usd=0.123456,
        tree_cost_usd=0.123456,
        budget_usd=0.25,
        tokens=123_456,
        budget_tokens=1_000_000,
        note="the run made 12 model calls, its limit " * 4,
    )
    deep = leaf
    for _ in range(4):
        deep = Node(
            agent="orchestrator",
            run_id="run_fedcba9876543210",
            status="running",
            turns=1,
            cost_usd=0.01,
            tree_cost_usd=1.5,
            children=(deep, leaf),
        )
    for width in (70, 80):
        lines = [line.plain for line in tree_lines(deep, width)]
        assert all(len(line) <= width for line in lines)
        assert sum("run_01234567" in line for line in lines) == 5
        assert any("a-researcher-with-a-very-long-name" not in line for line in lines)
        assert any(line.rstrip().endswith("…") for line in lines)


# -- colour -----------------------------------------------------------------------------------


def test_colour_only_on_a_terminal_and_never_with_no_color():
    root = demo_json("research")["run_id"]
    assert "\x1b[" not in cli("show", root) + cli("runs")  # CliRunner's stdout is no terminal
    coloured = cli("show", root, env={"FORCE_COLOR": "1"})
    assert "\x1b[32mcompleted" in coloured  # green
    assert_fits(coloured)
    assert "\x1b[" not in cli("show", root, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert "\x1b[" not in cli("runs", env={"FORCE_COLOR": "1", "NO_COLOR": "1"})


def test_statuses_have_their_colours():
    cli("demo", "runaway", "--max-turns", "3", code=3)
    cli("demo", "destructive", code=6)
    listed = cli("runs", env={"FORCE_COLOR": "1"})
    assert "\x1b[33mmax_turns_exceeded" in listed  # yellow
    assert "\x1b[35minterrupted" in listed  # magenta


# -- children in call order -------------------------------------------------------------------


def calls_of(store: SQLiteStore, run_id: str) -> list[str]:
    messages = store.load(run_id).messages
    return [c["id"] for m in messages for c in m.get("tool_calls") or ()]


def test_children_come_in_call_order_on_every_run(private_store: Path):
    orders = []
    for _ in range(2):
        report = demo_json("research")
        calls = calls_of(SQLiteStore(private_store), report["run_id"])
        shown = json.loads(cli("show", report["run_id"], "--json"))
        for tree in (report, shown):
            assert [c["parent_call_id"] for c in tree["children"]] == calls
        human = cli("show", report["run_id"])
        ids = [c["run_id"][:12] for c in shown["children"]]
        assert sorted(ids, key=human.index) == ids
        orders.append([c["answer"] for c in shown["children"]])
    assert orders[0] == orders[1]


# -- show tells the whole story ---------------------------------------------------------------


def test_show_after_approve_says_approved_and_ready_to_resume():
    root = demo_json("destructive")["run_id"]
    waiting = cli("show", root)
    assert "waiting for a human: delete_file" in waiting and "orchestra approve" in waiting
    cli("approve", root, code=0)
    approved = cli("show", root)
    assert "waiting for a human" not in approved and "orchestra approve" not in approved
    assert "delete_file) is approved; the run is ready to resume" in words(approved)
    assert f"orchestra resume {root}" in approved
    decision = json.loads(cli("show", root, "--json"))["decisions"]
    assert [(d["tool"], d["decision"], d["done"]) for d in decision] == [
        ("delete_file", "approved", False)
    ]
    cli("resume", root)
    resumed = json.loads(cli("show", root, "--json"))
    assert [(d["decision"], d["done"]) for d in resumed["decisions"]] == [("approved", True)]
    shown = words(cli("show", root))
    assert 'approved delete_file {"path": "access.log"} (ran; call_1_0 in run_' in shown


def test_show_after_reject_gives_the_reason():
    root = demo_json("destructive")["run_id"]
    cli("reject", root, "--reason", "keep the logs", code=0)
    rejected = cli("show", root)
    assert "delete_file) is rejected; the run is ready to resume" in words(rejected)
    assert 'rejected delete_file {"path": "access.log"}: keep the logs' in words(rejected)
    cli("resume", root)
    decision = json.loads(cli("show", root, "--json"))["decisions"]
    assert [(d["decision"], d["reason"], d["done"]) for d in decision] == [
        ("rejected", "keep the logs", True)
    ]
    assert "(the model was told; call_1_0 in run_" in words(cli("show", root))


def test_show_of_a_stored_run_has_its_elapsed_time_and_stop_reason():
    report = demo_json("runaway", "--max-turns", "3")
    shown = json.loads(cli("show", report["run_id"], "--json"))
    assert shown["run_elapsed_ms"] > 0 and shown["command_elapsed_ms"] is None
    assert abs(shown["run_elapsed_ms"] - report["run_elapsed_ms"]) < 50
    human = cli("show", report["run_id"])
    assert f"stopped: max_turns_exceeded ({report['reason']}) after " in words(human)


def test_show_says_what_budget_is_left():
    report = demo_json("plan", "--max-budget", "0.02", "--max-tokens-budget", "5000")
    shown = json.loads(cli("show", report["run_id"], "--json"))
    assert shown["budget_left_usd"] == pytest.approx(0.02 - report["tree_cost_usd"])
    assert shown["tokens_left"] == 5000 - report["tree_tokens"]
    assert "left)" in cli("show", report["run_id"])


# -- the live view ----------------------------------------------------------------------------


def event(type_: str, run_id: str, parent_id: str | None = None, **data) -> Event:
    return Event(type=type_, run_id=run_id, root_id="run_r", parent_id=parent_id, at=0, data=data)


def test_the_live_view_follows_turns_spend_and_tools():
    clock = iter(range(100))
    view = LiveTree(clock=lambda: float(next(clock)))
    view(event("run_started", "run_r", agent="assistant", limits={"max_budget_usd": 0.5}))
    view(event("turn", "run_r", turn=1, cost_usd=0.001, tree_cost_usd=0.001, total_tokens=300))
    for kid in ("run_a", "run_b"):
        view(event("run_started", kid, "run_r", agent="researcher", limits={}))
    view(event("turn", "run_a", "run_r", turn=1, cost_usd=0.002, tree_cost_usd=0.002))
    view(event("tool_start", "run_a", "run_r", tool="scan_archive", call_id="c1"))
    view(
        event(
            "tool_progress",
            "run_a",
            "run_r",
            tool="scan_archive",
            call_id="c1",
            label="scanned 400",
            elapsed_ms=400.0,
        )
    )
    view(event("run_stopped", "run_b", "run_r", status="budget_exceeded", reason="over", turns=2))
    lines = [line.plain for line in view.lines(80, 20)]
    assert all(len(line) <= 80 for line in lines)
    assert "1 running" not in lines[0] and "2 running, 1 stopped" in lines[0]
    assert "$0.0030 spent" in lines[0]  # the child's spend shows in the root's at once
    text = "\n".join(lines)
    assert "scan_archive: scanned 400 (0.4 s)" in text
    assert "budget_exceeded" in text and "over" in text
    view(event("tool_result", "run_a", "run_r", tool="scan_archive", call_id="c1"))
    assert "scanned 400" not in "\n".join(line.plain for line in view.lines(80, 20))


def test_the_live_view_keeps_within_the_terminal_height():
    view = LiveTree()
    view(event("run_started", "run_r", agent="assistant", limits={}))
    for i in range(50):
        view(event("run_started", f"run_{i}", "run_r", agent="researcher", limits={}))
        if i % 2:
            view(event("run_stopped", f"run_{i}", "run_r", status="completed", turns=1))
    lines = view.lines(80, 12)
    assert len(lines) <= 12 and lines[-1].plain == "… 42 more runs"
    assert all("completed" not in line.plain for line in lines)  # finished runs go first
    assert len(view.lines(80, 200)) == 2 + 51 * 2 - 25  # room for all: every note


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def session(**kw) -> Session:
    return Session(recipe=Recipe(directory="."), store=MemoryStore(), **kw)


@pytest.mark.parametrize(
    ("kw", "tty"),
    [({"live": True}, False), ({"live": False}, True), ({"live": True, "trace": "-"}, True)],
)
def test_no_live_view_without_a_terminal_or_with_json_or_a_trace_on_stderr(monkeypatch, kw, tty):
    monkeypatch.setattr(sys, "stderr", Terminal() if tty else io.StringIO())
    with _live_view(session(**kw)) as sink:
        assert sink is None


def test_the_live_view_draws_on_a_terminal_and_clears_itself(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with _live_view(session(live=True)) as sink:
        assert isinstance(sink, LiveTree)
        sink(event("run_started", "run_r", agent="assistant", limits={}))
        sink(event("price_warning", "run_r", message="no price"))
    drawn = terminal.getvalue()
    assert "assistant" in drawn and "run_r" in drawn
    assert drawn.endswith("\x1b[2K") or "\x1b[2K" in drawn[-40:]  # erased at the end


async def test_a_childs_call_is_decided_and_shown_where_it_waits(runner, sandbox, capsys):
    deleter = Agent(
        name="cleaner", model="destructive", tools=catalog(sandbox), limits=Limits(max_turns=5)
    )
    boss = Agent(
        name="boss",
        model="deep",
        tools=(deleter.as_tool(name="research"),),
        limits=Limits(max_turns=5),
    )

    def shown(root_id: str) -> tuple[dict, str]:
        stored = with_stored_children(RunResult(state=runner.store.load(root_id)), runner.store)
        out = report(stored, runner.store, None, None)
        print_tree(out)
        print_waiting(out, "")
        return out, words(capsys.readouterr().out)

    stopped = await runner.run(boss, "clean up")
    out, text = shown(stopped.run_id)
    [child] = out["children"]
    assert child["decisions"][0]["decision"] == "waiting" and out["decisions"] == []
    assert f"call call_1_0 in run {child['run_id']}: delete_file needs approval" in text
    runner.approve(stopped.run_id)
    out, text = shown(stopped.run_id)
    assert "waiting for a human" not in text
    assert "call call_1_0 (delete_file) is approved; the run is ready to resume" in text
    assert f"orchestra resume {stopped.run_id}" in text
    await runner.resume(stopped.run_id, boss)
    out, text = shown(stopped.run_id)
    assert out["children"][0]["decisions"][0]["done"] is True
    assert (
        f'approved delete_file {{"path": "access.log"}} (ran; call_1_0 in {child["run_id"][:12]})'
        in text
    )


def test_the_live_view_shows_each_run_s_streaming_words_at_80_columns():
    view = LiveTree()
    view(event("run_started", "run_r", agent="assistant", limits={}))
    view(event("run_started", "run_c", "run_r", agent="researcher", limits={}))
    view(event("model_request", "run_r", turn=1))
    view(event("model_request", "run_c", turn=1))
    for piece in ("Findings: 1) errors.log says ", "worker 7 timed out after 30000 ms; ", "2) the"):
        view(event("text_delta", "run_r", text=piece, tokens=5))
    view(event("text_delta", "run_c", "run_r", text="errors.log mentions a time", tokens=6))
    lines = [line.plain for line in view.lines(80, 24)]
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    assert "30000 ms; 2) the" in text  # the root's latest words, under its row
    assert "errors.log mentions a time" in text  # the child's, under its own row
    view(event("model_request", "run_r", turn=2))  # a new call: its words start afresh
    assert "30000 ms; 2) the" not in "\n".join(line.plain for line in view.lines(80, 24))
