"""``orchestra prices`` says what a model is charged and why; a reasoning run's
report says its cached and reasoning tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestra._cli.main import main

pytest.importorskip("genai_prices")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout


def test_prices_of_a_published_model_say_their_source() -> None:
    code, out = invoke("prices", "gpt-4.1-mini")
    lines = out.splitlines()
    assert (
        code == 0
        and lines[0] == "gpt-4.1-mini: $0.4 in, $0.1 cached in, $1.6 out per million tokens"
    )
    assert lines[1].startswith("source: genai-prices ") and lines[1].endswith("openai gpt-4.1-mini")


def test_prices_say_tiers_and_an_assumed_price() -> None:
    code, out = invoke("prices", "gemini-2.5-pro", "--json")
    said = json.loads(out)
    assert (
        code == 0 and said["tiers"][0]["from_prompt_tokens"] == 200_000 and said["warning"] is None
    )
    code, out = invoke("prices", "my-local-model")
    assert code == 0 and "source: assumed (Orchestra's default)" in out
    assert "warning: no price for model 'my-local-model'" in out


def test_a_reasoning_demo_reports_cached_and_reasoning_tokens(tmp_path: Path) -> None:
    store = str(tmp_path / "r.db")
    code, out = invoke("demo", "reasoning", "--store", store, "--json")
    report = json.loads(out)
    assert code == 0 and report["reasoning_tokens"] == 900 and report["cached_input_tokens"] > 0
    assert report["tree_reasoning_tokens"] == 900
    code, out = invoke("demo", "reasoning", "--store", store)
    assert code == 0 and ", 900 reasoning)" in out and " cached, " in out
