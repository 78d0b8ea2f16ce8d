"""A request for more (``--on-limit ask``) suggests the grant that answers it:
turns at a turn limit, USD or tokens at a budget; the suggestion, followed, lets
the resumed run go on instead of asking again at once."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestra._cli.main import main
from orchestra._views.printed import print_waiting

INTERRUPTED = 6


def run(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, (result.output, result.exception)
    return result


def suggested(printed: str) -> tuple[str, list[str]]:
    """The run id and the options of the printed ``grant:`` line."""
    flat = " ".join(printed.split())
    found = re.search(r"grant: orchestra grant (\S+)((?: --[a-z]+ \S+)*) reject:", flat)
    assert found is not None, flat
    return found[1], found[2].split()


def latest() -> dict[str, Any]:
    """The newest run of the (test's own) default store."""
    runs: list[dict[str, Any]] = json.loads(run("runs", "--json").stdout)
    return runs[0]


def test_a_turn_limit_suggests_turns_and_following_it_goes_on() -> None:
    asked = run("demo", "runaway", "--max-turns", "3", "--on-limit", "ask", code=INTERRUPTED)
    root, options = suggested(asked.stdout)
    assert options == ["--turns", "3"]  # USD alone adds no turns
    run("grant", root, *options)
    resumed = json.loads(run("resume", root, "--json", code=INTERRUPTED).stdout)
    assert resumed["turns"] == 6  # it went on for the turns granted (a runaway: asks again)
    assert resumed["interruption"]["call_id"] == "limit-6-1"


def test_the_request_says_what_it_needs_in_json() -> None:
    report = json.loads(
        run(
            "demo", "runaway", "--max-turns", "3", "--on-limit", "ask", "--json",
            code=INTERRUPTED,
        ).stdout
    )  # fmt: skip
    request = report["interruption"]
    assert request["arguments"] == {"turns": 3}
    assert "asks for more: 3 turns to finish" in request["reason"]


@pytest.mark.parametrize(
    ("limit", "option"),
    [(("--max-budget", "0.01"), "--usd"), (("--max-tokens-budget", "3000"), "--tokens")],
)
def test_a_budget_suggests_what_it_ran_out_of_and_following_it_goes_on(
    limit: tuple[str, str], option: str
) -> None:
    asked = run("demo", "runaway", *limit, "--on-limit", "ask", code=INTERRUPTED)
    root, options = suggested(asked.stdout)
    assert options[0] == option and len(options) == 2  # no turns: none were short
    before = latest()["turns"]
    run("grant", root, *options)
    run("resume", root, code=INTERRUPTED)
    assert latest()["turns"] > before  # the grant let it make more calls


def test_a_request_saved_without_what_it_needs_suggests_its_estimate_in_usd(
    capsys: pytest.CaptureFixture[str],
) -> None:
    request = {
        "kind": "budget_request",
        "run_id": "run_a",
        "call_id": "limit-3-0",
        "reason": "turn limit reached",
        "arguments": None,
        "estimate_usd": 0.25,
        "partial": "",
    }
    print_waiting(
        {"run_id": "run_a", "root_id": "run_a", "children": [], "interruption": request}, ""
    )
    assert suggested(capsys.readouterr().out) == ("run_a", ["--usd", "0.250000"])
