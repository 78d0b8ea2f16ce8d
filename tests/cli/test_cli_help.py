"""What the command line says about itself: ``--version``, help for every option,
the endpoint's environment variables, and words in the right number."""

from __future__ import annotations

import json
from importlib.metadata import version

import click
import pytest
from click.testing import CliRunner

from orchestra._cli.main import main


def test_version_comes_from_the_package_metadata() -> None:
    result = CliRunner().invoke(main, ["--version"], prog_name="orchestra")
    assert result.exit_code == 0
    assert result.stdout == f"orchestra {version('orchestra-trees')}\n"


def _leaves(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command, a group's subcommands by "group sub"."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            assert command.help, name
            found.update(_leaves(command, f"{prefix}{name} "))
        else:
            found[prefix + name] = command
    return found


COMMANDS = _leaves(main)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_of_every_command_has_help(name: str) -> None:
    command = COMMANDS[name]
    options = [p for p in command.params if isinstance(p, click.Option)]
    assert options
    assert [o.opts[0] for o in options if not o.help] == []
    assert command.help


def test_the_group_documents_the_exit_codes_and_debug() -> None:
    text = CliRunner().invoke(main, ["--help"], terminal_width=80).output
    assert "--debug" in text and "--version" in text
    for words in ("0  completed", "2  usage error", "6  interrupted", "8  operational error"):
        assert words in text


def test_run_help_names_the_endpoint_variables_and_fits_80_columns() -> None:
    text = CliRunner().invoke(main, ["run", "--help"], terminal_width=80).output
    assert "OPENAI_BASE_URL" in text and "OPENAI_API_KEY" in text
    for option in ("--instructions", "--tools", "--dedupe", "--dir", "--trace", "--api-key"):
        assert option in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_one_model_call_is_singular() -> None:
    result = CliRunner().invoke(main, ["demo", "runaway", "--max-turns", "1", "--json"])
    report = json.loads(result.stdout)
    assert report["reason"].endswith("reached: 1 model call of its own")


def test_a_child_stopped_after_one_turn_is_singular() -> None:
    from orchestra._result import RunResult, stop_sentence
    from orchestra._state import RunState, Status, Usage

    state = RunState(run_id="r", root_id="r", agent="helper", model="m", own=Usage(model_calls=1))
    state.status = Status.MAX_TURNS_EXCEEDED
    assert "after 1 turn," in stop_sentence(RunResult(state=state))


def test_orchestra_alone_shows_the_help() -> None:
    result = CliRunner().invoke(main, [], prog_name="orchestra")
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: orchestra [OPTIONS] COMMAND [ARGS]...")
