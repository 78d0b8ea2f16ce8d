"""``orchestra run``: a task with the file catalog against any OpenAI-compatible endpoint."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .._exceptions import ConfigError
from .._recipes.recipe import RUN_INSTRUCTIONS, RUN_MAX_TOKENS, RUN_TIMEOUT_S
from .common import (
    Reporting,
    TreeOptions,
    api_key_option,
    child_budget_option,
    child_turns_option,
    continue_option,
    provider_option,
    reporting_options,
    tree_options,
)
from .conversation import continuation
from .options import MAX_SECONDS, READ_ONLY_TOOLS, TURNS, Number, ToolNames, count

__all__ = ["run_command"]


@click.command("run")
@click.argument("task")
@click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help="The endpoint, e.g. http://localhost:8080/v1 [default: $OPENAI_BASE_URL (or "
    "$LLM_BASE_URL), else OpenAI's API when an OpenAI key is given; for --provider "
    "anthropic: $ANTHROPIC_BASE_URL, else Anthropic's API].",
)
@api_key_option
@click.option("--model", required=True, metavar="NAME", help="The model name the endpoint expects.")
@click.option(
    "--instructions",
    default=None,
    metavar="TEXT",
    help="The system message: who the agent is and how it works ('' for none). "
    "[default: answer from the files' contents, in plain sentences; written for small models]",
)
@click.option(
    "--tools",
    type=ToolNames(),
    default=",".join(READ_ONLY_TOOLS),
    show_default=True,
    help="Catalog tools to offer, by name or first word: list_files, read_file, "
    "search_files, delete_file (asks a human first).",
)
@click.option(
    "--look-first/--no-look-first",
    default=True,
    show_default=True,
    help="Make the model call a tool before it may answer (tool_choice 'required' until "
    "a tool ran): it looks at the files instead of answering from nothing.",
)
@click.option(
    "--budget-note",
    is_flag=True,
    help="End each request with a note of what the run has left (calls, budget, "
    "time), for the model to plan by (in the request only, never the transcript).",
)
@click.option(
    "--research",
    is_flag=True,
    help="Give the model a research tool: each call starts a child run with the same "
    "tools, its own budget (--child-budget) and turns (--child-turns), carved from this one's.",
)
@click.option(
    "--child-model",
    default=None,
    metavar="NAME",
    help="The model of research children (with --research). [default: --model]",
)
@child_budget_option
@child_turns_option
@click.option("--max-turns", type=TURNS, default=20, show_default=True, help="Model calls.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="The sandbox: the only directory the tools see (said on stderr at the start). "
    "[default: the current directory; with --continue, the conversation's if it is still there]",
)
@click.option(
    "--recover-tool-calls",
    is_flag=True,
    help="Read tool calls a model wrote as JSON text in its answer (declared tools only).",
)
@click.option(
    "--request-timeout",
    type=Number(max=MAX_SECONDS, min_open=True),
    default=RUN_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Seconds one model reply may take, whole (a local model on a CPU is slow).",
)
@click.option(
    "--max-tokens",
    type=count(1_000_000, low=1),
    default=RUN_MAX_TOKENS,
    show_default=True,
    help="Most tokens per reply (the budget may lower it).",
)
@click.option(
    "--wait-for-server",
    "wait_for_server_s",
    type=Number(max=MAX_SECONDS),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Keep retrying an endpoint that refuses connections for this long (a server "
    "still starting); by default a refused connection fails the run at once.",
)
@provider_option
@tree_options
@reporting_options
@continue_option
def run_command(
    task: str,
    base_url: str | None,
    api_key: str,
    model: str,
    instructions: str | None,
    tools: tuple[str, ...],
    look_first: bool,
    budget_note: bool,
    research: bool,
    child_model: str | None,
    child_budget: float,
    child_turns: int,
    max_turns: int,
    directory: str | None,
    recover_tool_calls: bool,
    request_timeout: float,
    max_tokens: int,
    wait_for_server_s: float,
    wire: str | None,
    tree: TreeOptions,
    reporting: Reporting,
    continue_from: str | None,
) -> None:
    """Run TASK with the file catalog against any OpenAI-compatible endpoint.

    The endpoint and key may come from $OPENAI_BASE_URL and $OPENAI_API_KEY;
    with a key and no endpoint, the run goes to OpenAI's API.
    The tools see only the sandbox directory (--dir: the current one by
    default; a continuation keeps its conversation's); they read only, unless
    --tools offers delete_file. Everything but the key is saved with the run,
    so `orchestra resume` rebuilds the same agent.
    """
    from . import start

    earlier = continuation(reporting.store_path, continue_from)  # before anything is made
    if directory is None:
        directory = (earlier.sandbox() if earlier else None) or "."
    wire, model = wire_of(wire, model)
    recipe = start.recipe(
        tree,
        reporting,
        directory=str(Path(directory).resolve()),
        base_url=_endpoint(base_url, api_key, wire),
        wire=wire,
        model=model,
        instructions=RUN_INSTRUCTIONS if instructions is None else instructions,
        tools=tools,
        look_first=look_first,
        budget_note=budget_note,
        research=research,
        child_model=child_model,
        child_budget=child_budget,
        child_turns=child_turns,
        recover_tool_calls=recover_tool_calls,
        request_timeout=request_timeout,
        max_tokens=max_tokens,
        wait_for_server_s=wait_for_server_s,
    )
    kept = f"{earlier.said(recipe.directory)}; " if earlier else ""
    click.echo(f"sandbox: {recipe.directory} ({kept}tools: {', '.join(tools)})", err=True)
    store = earlier.store if earlier else None
    session, spans = start.session(recipe, reporting, store=store, api_key=api_key)
    limits = start.limits(max_turns, tree)
    start.start(session, limits, task, reporting, spans, earlier.run_id if earlier else None)


def _endpoint(base_url: str | None, api_key: str, wire: str = "chat") -> str:
    """``--base-url``, else the vendor's API if a key for it was given or set
    (saved with the run, so a resume goes to the same place).

    Raises:
        ConfigError: neither an endpoint nor a key.
    """
    from .._model.anthropic import ANTHROPIC_URL
    from .._model.provider import OPENAI_URL

    if base_url:
        return base_url
    if wire != "anthropic":  # an OpenAI endpoint's variable never sends an Anthropic key
        url = os.environ.get("OPENAI_BASE_URL") or os.environ.get("LLM_BASE_URL")
        if url:
            return url
    if wire == "anthropic":
        url = os.environ.get("ANTHROPIC_BASE_URL")
        if url or api_key or os.environ.get("ANTHROPIC_API_KEY"):
            return url or ANTHROPIC_URL
        raise ConfigError(
            "say where the model is: --base-url URL (or $ANTHROPIC_BASE_URL), or an Anthropic "
            "key (--api-key, $ANTHROPIC_API_KEY) for Anthropic's API"
        )
    if api_key or os.environ.get("OPENAI_API_KEY"):
        return OPENAI_URL
    raise ConfigError(
        "say where the model is: --base-url URL (or $OPENAI_BASE_URL), or an OpenAI key "
        "(--api-key, $OPENAI_API_KEY) for OpenAI's API"
    )


def wire_of(given: str | None, model: str) -> tuple[str, str]:
    """The wire format and the model name: ``--provider`` if given; else a model
    written ``NAME:MODEL`` with a provider's name (``anthropic:claude-sonnet-4-5``,
    ``openai:gpt-4.1-mini``) names it, and ``MODEL`` is what is sent; else chat."""
    from .common import WIRES

    name, colon, rest = model.partition(":")
    if colon and name in WIRES and rest:
        return given or WIRES[name], rest
    return given or "chat", model
