"""What a newcomer looks for in the demos: the price a demo is charged
(``orchestra prices plan``), a tree streaming slowly enough to watch
(``demo --chunk-ms``)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from orchestra._cli.main import main


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_prices_of_a_demo_model_are_what_the_demo_charges_cached_input_included() -> None:
    for model in ("plan", "plan+429x3", "researcher"):
        said = cli("prices", model).splitlines()
        assert said == [
            f"{model}: $2 in, $0.5 cached in, $12 out per million tokens",
            "source: the scripted provider's (`orchestra demo` runs)",
        ]
    rates = json.loads(cli("prices", "reasoning", "--json"))
    assert (rates["input_per_million"], rates["cached_input_per_million"]) == (2.0, 0.5)
    assert (rates["output_per_million"], rates["warning"]) == (12.0, None)
    elsewhere = cli("prices", "plan", "--base-url", "http://127.0.0.1:9/v1")
    assert "source: assumed (Orchestra's default)" in elsewhere  # another server's "plan"


def test_the_demo_charges_cached_input_at_the_price_prices_shows(tmp_path: Path) -> None:
    report = json.loads(cli("demo", "reasoning", "--store", str(tmp_path / "r.db"), "--json"))
    cached, fresh = (
        report["cached_input_tokens"],
        report["prompt_tokens"] - report["cached_input_tokens"],
    )
    billed = (fresh * 2.0 + cached * 0.5 + report["completion_tokens"] * 12.0) / 1e6
    assert cached > 0 and abs(report["cost_usd"] - billed) < 1e-9


def test_demo_chunk_ms_paces_each_chunk_of_a_streamed_reply(tmp_path: Path) -> None:
    store = str(tmp_path / "r.db")
    lines = cli("demo", "plan", "--chunk-ms", "20", "--json-events", "--store", store)
    events = [json.loads(line) for line in lines.splitlines()]
    asked = [e["at"] for e in events if e["type"] == "model_request"][-1]
    deltas = [e["at"] for e in events if e["type"] == "text_delta" and e["at"] > asked]
    assert len(deltas) >= 3
    # each chunk waits 20 ms before it is sent: the last cannot come sooner than this
    assert deltas[-1] - asked >= len(deltas) * 0.020 - 0.001
    assert "--chunk-ms MS" in cli("demo", "--help")
