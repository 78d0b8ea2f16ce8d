"""Help that says what the commands do: ``--api-key`` of the commands that go on
with saved runs, and what ``--debug`` does to the exit code."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from orchestra._cli.main import main
from orchestra._exceptions import RunNotFound


def option_help(command: str, option: str) -> str:
    found = main.commands[command]
    params = [p for p in found.params if isinstance(p, click.Option) and option in p.opts]
    assert len(params) == 1
    return " ".join((params[0].help or "").split())


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_api_key_help_names_only_options_the_command_has(command: str) -> None:
    text = option_help(command, "--api-key")
    assert "$OPENAI_API_KEY" in text and "$ANTHROPIC_API_KEY for a run on Anthropic's API" in text
    options = {o for p in main.commands[command].params for o in p.opts}
    assert "--provider" not in options and "--provider" not in text


def test_debug_help_says_the_exit_code_becomes_1() -> None:
    text = " ".join(CliRunner().invoke(main, ["--help"], terminal_width=80).output.split())
    assert "the command then exits 1, not with the error's usual code (8, 9, or 2" in text


def test_debug_does_exit_1_where_the_error_would_exit_8() -> None:
    assert CliRunner().invoke(main, ["demo", "plan"]).exit_code == 0  # a store, without that run
    said = CliRunner().invoke(main, ["show", "run_no_such_id"])
    assert said.exit_code == 8
    debugged = CliRunner().invoke(main, ["--debug", "show", "run_no_such_id"])
    assert debugged.exit_code == 1 and isinstance(debugged.exception, RunNotFound)
