"""``--provider``: the wire format of a tree's model calls, saved with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestra._cli.main import main
from orchestra._recipes.recipe import Recipe
from orchestra._stores.sqlite import SQLiteStore


@pytest.mark.parametrize("scenario", ["plan", "research"])
def test_a_demo_over_anthropics_wire_completes_as_over_chat(tmp_path: Path, scenario: str) -> None:
    reports = {}
    for wire in ("chat", "anthropic"):
        store = tmp_path / f"{wire}.db"
        args = ["demo", scenario, "--provider", wire, "--store", str(store), "--json"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        reports[wire] = json.loads(result.stdout)
        with SQLiteStore(store) as saved:
            assert Recipe.of(saved.load(reports[wire]["run_id"])).wire == wire
    chat, messages = reports["chat"], reports["anthropic"]
    assert messages["status"] == chat["status"] == "completed"
    assert messages["answer"] == chat["answer"]
    assert len(messages["children"]) == len(chat["children"])
    # the same replies; the prompts as the server counted them after translation
    assert messages["tree_cost_usd"] == pytest.approx(chat["tree_cost_usd"], rel=0.01)


def test_a_run_over_anthropics_wire_needs_an_endpoint_or_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestra._cli.run_task import _endpoint
    from orchestra._model.anthropic import ANTHROPIC_URL

    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(
        main, ["run", "why?", "--model", "claude-x", "--provider", "anthropic"]
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "error: say where the model is: --base-url URL (or $ANTHROPIC_BASE_URL)" in result.stderr
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")  # never sent to another vendor
    assert result.exit_code != 0
    with pytest.raises(Exception, match="ANTHROPIC_BASE_URL"):
        _endpoint(None, "", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    assert _endpoint(None, "", "anthropic") == ANTHROPIC_URL == "https://api.anthropic.com/v1"
    # an OpenAI-compatible endpoint's variable (a local server) never gets the Anthropic key
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    assert _endpoint(None, "", "anthropic") == ANTHROPIC_URL
    assert _endpoint(None, "", "chat") == "http://127.0.0.1:8080/v1"


def test_a_model_named_with_its_provider_picks_the_wire_format() -> None:
    from orchestra._cli.run_task import wire_of

    assert wire_of(None, "anthropic:claude-sonnet-4-5") == ("anthropic", "claude-sonnet-4-5")
    assert wire_of(None, "openai:gpt-4.1-mini") == ("chat", "gpt-4.1-mini")
    assert wire_of(None, "openai-responses:o3-mini") == ("responses", "o3-mini")
    assert wire_of(None, "gpt-4.1-mini") == ("chat", "gpt-4.1-mini")
    assert wire_of(None, "hf.co/org/model:Q4_K_M") == ("chat", "hf.co/org/model:Q4_K_M")
    assert wire_of("responses", "openai:gpt-4.1") == ("responses", "gpt-4.1")


def test_provider_names_users_know_are_taken(tmp_path: Path) -> None:
    for name, wire in (("openai", "chat"), ("openai-responses", "responses")):
        store = tmp_path / f"{name}.db"
        args = ["demo", "plan", "--provider", name, "--store", str(store), "--json"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        with SQLiteStore(store) as saved:
            run_id = json.loads(result.stdout)["run_id"]
            assert Recipe.of(saved.load(run_id)).wire == wire
