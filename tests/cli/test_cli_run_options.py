"""``orchestra run`` shapes its agent (instructions, tools, dedupe), says its
sandbox, and ``orchestra resume`` rebuilds the same agent from the saved recipe."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestra._catalog import catalog
from orchestra._cli.main import main
from orchestra._cli.options import CATALOG_TOOLS, READ_ONLY_TOOLS
from orchestra._exceptions import StateError
from orchestra._recipes.recipe import RUN_INSTRUCTIONS, Recipe
from orchestra._state import Limits, RunState
from orchestra._stores.sqlite import SQLiteStore
from orchestra.testing import make_sandbox

ORCHESTRA = [sys.executable, "-m", "orchestra"]


def run(url: str, sandbox: Path, model: str, *extra: str, code: int = 0) -> tuple[dict, str]:
    """``orchestra run`` in this process: its JSON report and its stderr."""
    result = CliRunner().invoke(
        main,
        [
            *("run", "Free some space.", "--base-url", url, "--model", model),
            *("--dir", str(sandbox), "--price-in", "2", "--price-out", "12", "--json", *extra),
        ],
    )
    assert result.exit_code == code, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report, result.stderr


def saved(store: Path, run_id: str) -> RunState:
    with SQLiteStore(store) as s:
        return s.load(run_id)


@pytest.fixture
def box(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "box")


def test_the_sandbox_is_said_on_stderr_and_in_the_report(server_url: str, box: Path) -> None:
    report, stderr = run(server_url, box, "plan")
    tools = "list_files, read_file, search_files"
    assert stderr.splitlines()[0] == f"sandbox: {box.resolve()} (tools: {tools})"
    assert report["dir"] == str(box.resolve())


def test_by_default_only_read_only_tools_are_offered(server_url: str, box: Path) -> None:
    report, _ = run(server_url, box, "destructive")
    assert report["status"] == "completed"  # no delete_file to ask approval for
    assert "no tool named 'delete_file'" in report["answer"]
    assert (box / "access.log").exists()


def test_writes_are_opt_in_and_resume_rebuilds_the_same_agent(
    server_url: str, box: Path, private_store: Path
) -> None:
    stopped, stderr = run(
        *(server_url, box, "destructive", "--tools", "list,read,delete"),
        *("--instructions", "Ask before deleting anything.", "--dedupe"),
        code=6,
    )
    assert "(tools: list_files, read_file, delete_file)" in stderr
    assert stopped["interruption"]["tool"] == "delete_file"
    state = saved(private_store, stopped["run_id"])
    assert state.messages[0] == {"role": "system", "content": "Ask before deleting anything."}
    recipe = Recipe.of(state)
    assert (recipe.tools, recipe.instructions, recipe.dedupe) == (
        ("list_files", "read_file", "delete_file"),
        "Ask before deleting anything.",
        True,
    )
    agent = recipe.agent(Limits())
    assert [t.name for t in agent.tools] == ["list_files", "read_file", "delete_file"]
    assert agent.instructions == "Ask before deleting anything." and agent.policy.dedupe

    assert CliRunner().invoke(main, ["approve", stopped["run_id"]]).exit_code == 0
    done = CliRunner().invoke(main, ["resume", stopped["run_id"], "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["answer"] == "Deleted access.log to free space."
    assert not (box / "access.log").exists()


def test_dedupe_answers_a_repeated_read_from_the_transcript(server_url: str, box: Path) -> None:
    plain, _ = run(server_url, box, "repeat")
    deduped, _ = run(server_url, box, "repeat", "--dedupe")
    assert deduped["tool_runs"] == plain["tool_runs"] - 1


def test_by_default_the_model_looks_first_under_instructions_for_small_models(
    server_url: str, box: Path, private_store: Path
) -> None:
    report, _ = run(server_url, box, "plan")
    state = saved(private_store, report["run_id"])
    assert state.messages[0] == {"role": "system", "content": RUN_INSTRUCTIONS}
    assert Recipe.of(state).agent(Limits()).look_first
    report, _ = run(server_url, box, "plan", "--no-look-first", "--instructions", "")
    state = saved(private_store, report["run_id"])
    assert state.messages[0]["role"] == "user"
    assert not Recipe.of(state).agent(Limits()).look_first


def test_the_canned_scan_is_never_offered_to_a_model(server_url: str, box: Path) -> None:
    report, _ = run(server_url, box, "slow")
    assert "no tool named 'scan_archive'" in json.dumps(report)
    result = CliRunner().invoke(
        main, ["run", "t", "--base-url", server_url, "--model", "m", "--tools", "scan_archive"]
    )
    assert result.exit_code == 2
    assert "unknown tool 'scan_archive'" in result.stderr


def test_an_unknown_tool_is_a_usage_error_listing_the_choices(box: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["run", "t", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "list,rm"],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: Invalid value for '--tools': unknown tool 'rm': ")
    assert (
        "list_files (list), read_file (read), search_files (search), delete_file (delete)"
        in result.stderr
    )


def test_the_option_knows_the_catalog(tmp_path: Path) -> None:
    tools = catalog(tmp_path)
    assert tuple(t.name for t in tools) == CATALOG_TOOLS
    read_only = {t.name for t in tools if t.read_only and not t.needs_approval}
    assert set(READ_ONLY_TOOLS) <= read_only


def test_a_recipe_saved_before_tools_existed_keeps_the_whole_catalog(tmp_path: Path) -> None:
    old = Recipe(directory=str(tmp_path), base_url="http://x/v1", model="m")
    metadata = json.loads(old.metadata()["orchestra.cli.recipe"])
    for key in ("tools", "instructions"):
        del metadata[key]
    state = RunState(
        run_id="run_old",
        root_id="run_old",
        agent="assistant",
        model="m",
        metadata={"orchestra.cli.recipe": json.dumps(metadata)},
    )
    agent = Recipe.of(state).agent(Limits())
    assert tuple(t.name for t in agent.tools) == CATALOG_TOOLS


def test_a_recipe_from_a_newer_cli_is_refused(tmp_path: Path) -> None:
    metadata = json.loads(Recipe(directory=str(tmp_path)).metadata()["orchestra.cli.recipe"])
    state = RunState(
        run_id="run_new",
        root_id="run_new",
        agent="assistant",
        model="m",
        metadata={"orchestra.cli.recipe": json.dumps({**metadata, "wings": 2})},
    )
    with pytest.raises(StateError, match=r"newer orchestra CLI .* wings"):
        Recipe.of(state)


def test_the_report_names_the_endpoint_the_tree_asked(server_url: str, box: Path) -> None:
    report, _ = run(server_url, box, "plan")
    assert report["endpoint"] == server_url


def test_with_no_endpoint_and_no_key_the_run_says_where_to_point_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_BASE_URL", "LLM_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["run", "why?", "--model", "gpt-4.1-mini"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.stderr.strip() == (
        "error: say where the model is: --base-url URL (or $OPENAI_BASE_URL), or an OpenAI "
        "key (--api-key, $OPENAI_API_KEY) for OpenAI's API"
    )


def test_an_openai_key_alone_points_runs_at_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestra import OpenAIProvider
    from orchestra._cli.run_task import _endpoint
    from orchestra._model.provider import OPENAI_URL, default_base_url

    for name in ("OPENAI_BASE_URL", "LLM_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert OPENAI_URL == "https://api.openai.com/v1"
    assert default_base_url() is None and _endpoint(None, "sk-x") == OPENAI_URL
    assert _endpoint("http://127.0.0.1:9/v1", "sk-x") == "http://127.0.0.1:9/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    provider = OpenAIProvider()  # nothing is asked: no request leaves the machine
    assert provider.base_url == OPENAI_URL and provider.provider_name == "openai"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert OpenAIProvider().base_url == "http://127.0.0.1:9/v1"


def test_research_gives_the_model_children_with_limits_of_their_own(
    server_url: str, box: Path
) -> None:
    report, _ = run(
        server_url, box, "research", "--research", "--child-model", "researcher",
        "--child-budget", "0.01", "--child-turns", "5", "--max-budget", "0.05",
    )  # fmt: skip
    assert report["status"] == "completed"
    children = report["children"]
    assert len(children) == 3 and {c["agent"] for c in children} == {"researcher"}
    assert all(c["status"] == "completed" and c["max_turns"] == 5 for c in children)
    assert all(c["tree_cost_usd"] <= c["budget_usd"] <= 0.01 for c in children)
    assert report["tree_cost_usd"] <= 0.05


def test_research_is_saved_with_the_run_and_rebuilt_on_resume(tmp_path: Path) -> None:
    recipe = Recipe(
        directory=str(tmp_path), base_url="http://x/v1", model="m", research=True,
        child_model="small", child_budget=0.02, child_turns=4,
    )  # fmt: skip
    again = Recipe.of(RunState(run_id="r", root_id="r", agent="assistant", model="m",
                               metadata=recipe.metadata()))  # fmt: skip
    agent = again.agent(Limits(max_turns=3))
    [tool] = [t for t in agent.tools if t.name == "research"]
    researcher = agent.find("researcher")
    assert researcher is not None and researcher.model == "small"
    assert researcher.limits == Limits(max_turns=4, max_budget_usd=0.02)
    assert "research" not in {t.name for t in researcher.tools}  # one level
    assert "call research once per part" in agent.instructions
    assert tool.description.startswith("Hand one question to a researcher")
