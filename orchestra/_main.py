"""The ``orchestra`` command line.

Every command takes ``--store PATH`` (default: ``$ORCHESTRA_STORE`` or the
user data directory), so a run started in one process can be shown, approved,
cancelled and resumed from another.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import click
from click.shell_completion import CompletionItem

from ._cli.errors import CommandError, OrchestraGroup, status_exit
from ._cli.money import Money, money_options, tokens_option
from ._cli.options import (
    MAX_SECONDS,
    READ_ONLY_TOOLS,
    SECONDS,
    TURNS,
    USD,
    Number,
    OutputFile,
    ToolNames,
    count,
)
from ._cli.output import print_runs, print_tree, print_waiting
from ._cli.recipe import RUN_MAX_TOKENS, RUN_TIMEOUT_S, Recipe
from ._exceptions import OrchestraError
from ._state import Limits, RunState, Status
from ._telemetry.otlp_protocol import PROTOCOLS

if TYPE_CHECKING:
    from ._cli.session import Session
    from ._stores.contract import DurableStore

# Modules that run trees (trio, the runner, the tokenizer, OpenTelemetry, the
# demo's tools) are imported inside the commands that need them: `--help`,
# `runs`, `show` and `cancel` start without them (tests/test_startup.py).

__all__ = ["main", "run"]


def _store(path: str | None) -> DurableStore:
    """The SQLite store at ``path``, or the PostgreSQL store a postgresql:// URL names."""
    from ._stores.sqlite import SQLiteStore

    if _distributed(path):
        from .distributed import PostgresStore

        return PostgresStore(str(path))
    return SQLiteStore(path)


def _distributed(path: str | None) -> bool:
    """Whether ``--store`` names a PostgreSQL database (runs executed by workers)."""
    if path is None or not path.startswith(("postgresql://", "postgres://")):
        return False
    from .distributed._cli import missing

    problem = missing()
    if problem is not None:
        raise CommandError(f"a postgresql:// store needs {problem}")
    return True


def _loaded(store_path: str | None, run_id: str) -> tuple[DurableStore, RunState]:
    """The store and the run that a (possibly shortened) id names."""
    store = _store(store_path)
    return store, store.load(store.resolve(run_id))


def _store_flag(path: str | None) -> str:
    return f" --store {path}" if path else ""


store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Run store: a SQLite file (default: $ORCHESTRA_STORE or the user data "
    "directory), or a postgresql:// URL whose runs `orchestra worker`s execute.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


def mcp_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--mcp COMMAND`` and ``--mcp-url URL``, each repeatable (needs the mcp extra)."""
    fn = click.option(
        "--mcp-url",
        "mcp_urls",
        multiple=True,
        metavar="URL",
        help="An MCP server over streamable HTTP (repeatable).",
    )(fn)
    return click.option(
        "--mcp",
        "mcp_commands",
        multiple=True,
        metavar="COMMAND",
        help="An MCP server to start, e.g. 'python examples/mcp_files.py DIR' (repeatable): "
        "its tools join the agent's, replacing catalog tools of the same name.",
    )(fn)


def otlp_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--otlp``: export spans over OTLP (standard ``OTEL_*`` variables apply);
    ``--provider-name`` and ``--capture-content`` say what the spans hold."""
    fn = click.option(
        "--capture-content",
        is_flag=True,
        help="Record messages, tool arguments and results on spans (redacted, bounded; "
        "also OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true).",
    )(fn)
    fn = click.option(
        "--provider-name",
        default=None,
        metavar="NAME",
        help="gen_ai.provider.name on spans (default: from the endpoint's host, e.g. "
        "openai for api.openai.com); a resume keeps the one the run started with.",
    )(fn)
    fn = click.option(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="Overrides OTEL_EXPORTER_OTLP_ENDPOINT.",
    )(fn)
    fn = click.option(
        "--otlp-protocol",
        type=click.Choice(PROTOCOLS),
        default=None,
        help="Overrides OTEL_EXPORTER_OTLP_PROTOCOL.",
    )(fn)
    return click.option("--otlp", is_flag=True, help="Export OpenTelemetry spans over OTLP.")(fn)


def _tracing(
    otlp: bool, protocol: str | None, endpoint: str | None, capture_content: bool = False
) -> tuple[Any, Any]:
    if not otlp:
        return None, None
    from ._telemetry.otel import OTelTracer, configure_otlp

    provider = configure_otlp(protocol=protocol, endpoint=endpoint)
    capture = True if capture_content else None  # None: the environment variable decides
    return OTelTracer(tracer_provider=provider, capture_content=capture), provider


def _limits(
    max_turns: int | None,
    max_budget: float | None,
    timeout: float | None,
    max_tokens_total: int | None = None,
) -> Limits:
    return Limits(
        max_turns=max_turns,
        max_budget_usd=max_budget,
        timeout_s=timeout,
        max_tokens_total=max_tokens_total,
    )


def _money_fields(money: Money) -> dict[str, Any]:
    return attrs.asdict(money)


def _sandbox(directory: str | None) -> Path:
    import tempfile

    from ._scripted import make_sandbox

    if directory is None:
        return make_sandbox(tempfile.mkdtemp(prefix="orchestra-demo-"))
    path = Path(directory)
    return path if path.is_dir() and any(path.iterdir()) else make_sandbox(path)


def _finish(
    result: Any,
    session: Session,
    elapsed: float | None,
    as_json: bool,
    store_path: str | None,
    spans: Any = None,
) -> None:
    from ._cli.session import report

    out = report(result, session.store, elapsed, session.recipe.directory)
    if as_json:
        if spans is not None:
            out["spans_exported"] = _export_spans(spans)
        click.echo(json.dumps(out, sort_keys=True))
    else:
        print_tree({**out, "trace_id": None})  # said below, once its spans are sent
        print_waiting(out, _store_flag(store_path))
        sys.stdout.flush()  # the result shows now; exporting the last spans may take longer
        if spans is not None:
            exported = _export_spans(spans)
            click.echo(f"trace: {out['trace_id']}" if exported else "trace: not exported")
    sys.exit(status_exit(result.status))


def _export_spans(spans: Any) -> bool:
    """Send the last spans, for 2 s at most; if they were not exported, say why on stderr."""
    from ._telemetry.otel import finish_export

    why = finish_export(spans)
    if why is not None:
        click.echo(f"warning: spans were not exported: {why}", err=True)
    return why is None


def _start(
    session: Session,
    limits: Limits,
    task: str,
    as_json: bool,
    store_path: str | None,
    spans: Any = None,
) -> None:
    from ._execute import new_run_id
    from ._model.tokens import encoding

    if _distributed(store_path):
        from .distributed._cli import submit_and_follow

        assert store_path is not None
        result, ms = submit_and_follow(store_path, session.recipe, limits, task)
        _finish(result, session, ms, as_json, store_path, spans)
        return
    encoding()  # load the tokenizer before the clock starts
    root_id = new_run_id()

    async def go(runner: Any, mcp_tools: Any) -> Any:
        agent = session.recipe.agent(limits, mcp_tools)
        return await runner.run(agent, task, run_id=root_id, metadata=session.recipe.metadata())

    result, elapsed = _drive(session, root_id, go)
    _finish(result, session, elapsed, as_json, store_path, spans)


def _drive(session: Session, root_id: str, go: Callable[[Any, Any], Any]) -> tuple[Any, float]:
    """Run ``go`` under the session's supervision on trio; its result and elapsed ms."""
    import stamina.instrumentation
    import trio

    from ._cli.session import supervise

    # Retries are reported as model_retry events and summarised; stamina's own
    # log line per retry would only repeat them on stderr.
    stamina.instrumentation.set_on_retry_hooks([])
    return trio.run(supervise, session, root_id, go)


class ScenarioType(click.types.StringParamType):
    """A demo scenario, optionally with fault modifiers: ``plan``, ``plan+429x3``."""

    name = "scenario"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SCENARIO[+FAULT[xN]...]"  # the scenarios are listed in the help, one a line

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from ._cli.demo import parse_scenario

        name = super().convert(value, param, ctx)
        try:
            parse_scenario(name)
        except OrchestraError as exc:
            self.fail(str(exc), param, ctx)
        return name

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        from ._cli.demo import SCENARIOS

        return [CompletionItem(s) for s in SCENARIOS if s.startswith(incomplete)]


@click.group(cls=OrchestraGroup)
@click.version_option(package_name="orchestra", message="%(prog)s %(version)s")
@click.option(
    "--debug",
    is_flag=True,
    envvar="ORCHESTRA_DEBUG",
    show_envvar=True,
    help="On an error, show its Python traceback instead of one line.",
)
def main(debug: bool) -> None:
    """Orchestra: LLM agents as governed trees.

    An error is one line `error: ...` on stderr. Exit codes:

    \b
      0  completed            4  budget_exceeded      8  operational error:
      1  failed               5  deadline_exceeded       store, lease, no such
      2  usage error          6  interrupted             run, cannot resume
      3  max_turns_exceeded                           9  internal error (a bug)
    """
    # `debug` is read from the context by OrchestraGroup.invoke, around every command.


class DemoCommand(click.Command):
    """``orchestra demo``: its help lists each scenario with what it does."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ._cli.demo import SCENARIOS
        from ._scripted.scenarios import SCENARIOS as SCRIPTS

        super().format_help_text(ctx, formatter)
        with formatter.section("Scenarios"):
            formatter.write_dl([(name, SCRIPTS[name].description) for name in SCENARIOS])


def max_budget_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--max-budget`` in USD (finite, at most a million)."""
    return click.option("--max-budget", type=USD, default=None, metavar="USD", help=help_text)


def timeout_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--timeout`` in seconds (finite)."""
    return click.option("--timeout", type=SECONDS, default=None, metavar="SECONDS", help=help_text)


def trace_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--trace FILE``: the run's events as JSON lines (its directory must exist)."""
    return click.option(
        "--trace",
        type=OutputFile(),
        default=None,
        metavar="FILE",
        help="Append the run's events to FILE as JSON lines (- for stderr).",
    )(fn)


def api_key_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--api-key`` (never saved; ``$OPENAI_API_KEY`` by default)."""
    return click.option(
        "--api-key",
        envvar="OPENAI_API_KEY",
        default="",
        show_envvar=True,
        metavar="KEY",
        help="Bearer key for the endpoint; never saved with the run.",
    )(fn)


@main.command(cls=DemoCommand)
@click.argument("scenario", type=ScenarioType())
@click.option(
    "--max-turns",
    type=TURNS,
    default=None,
    help="Model calls for the whole tree. [default: 20; slow_tree: 2 + 2 per child]",
)
@max_budget_option("USD for the whole tree.")
@timeout_option("Seconds for the whole tree.")
@click.option(
    "--child-budget",
    type=USD,
    default=0.05,
    show_default=True,
    metavar="USD",
    help="USD each research child may spend (its own tree).",
)
@click.option(
    "--child-turns",
    type=TURNS,
    default=8,
    show_default=True,
    help="Model calls each research child may make.",
)
@click.option(
    "--children",
    type=click.IntRange(1, 100),
    default=None,
    help="slow_tree: how many children. [default: 3]",
)
@click.option("--dedupe", is_flag=True, help="Answer repeated read-only calls from the transcript.")
@click.option(
    "--errors",
    type=click.Choice(["detailed", "generic"]),
    default="detailed",
    show_default=True,
    help="How tool errors are worded for the model.",
)
@click.option("--fatal-errors", is_flag=True, help="Any tool error fails the run.")
@click.option(
    "--cancel-after",
    type=SECONDS,
    default=None,
    metavar="SECONDS",
    help="Press Stop after this many seconds.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Sandbox directory (made, with the demo files, if missing or empty). "
    "[default: a new temporary directory]",
)
@trace_option
@store_option
@json_option
@otlp_options
@tokens_option
@money_options
@mcp_options
def demo(
    scenario: str,
    max_turns: int | None,
    max_budget: float | None,
    max_tokens_total: int | None,
    money: Money,
    timeout: float | None,
    child_budget: float,
    child_turns: int,
    children: int | None,
    dedupe: bool,
    errors: str,
    fatal_errors: bool,
    cancel_after: float | None,
    directory: str | None,
    trace: str | None,
    store_path: str | None,
    as_json: bool,
    otlp: bool,
    otlp_protocol: str | None,
    otlp_endpoint: str | None,
    provider_name: str | None,
    capture_content: bool,
    mcp_commands: tuple[str, ...],
    mcp_urls: tuple[str, ...],
) -> None:
    """Run SCENARIO against the embedded scripted provider.

    SCENARIO may add faults, SCENARIO+FAULT[xN]...: an HTTP status (429, 500,
    401, ...), hang, garbage, truncated, reset, nousage or promptPCT; the first
    N requests (default 1) meet each. `orchestra resume` plays no faults.
    """
    from ._cli.demo import demo_task, parse_scenario
    from ._cli.session import Session

    recipe = Recipe(
        directory=str(_sandbox(directory)),
        scenario=scenario,
        dedupe=dedupe,
        errors=errors,
        fatal_errors=fatal_errors,
        child_budget=child_budget,
        child_turns=child_turns,
        provider_name=provider_name,
        mcp=(*mcp_commands, *mcp_urls),
        **_money_fields(money),
    )
    if max_turns is None:
        slow_tree = parse_scenario(scenario)[0] == "slow_tree"
        max_turns = 2 + 2 * (children or 3) if slow_tree else 20
    tracer, spans = _tracing(otlp, otlp_protocol, otlp_endpoint, capture_content)
    session = Session(
        recipe=recipe,
        store=_store(store_path),
        trace=trace,
        cancel_after=cancel_after,
        tracer=tracer,
        live=not as_json,
    )
    _start(
        session,
        _limits(max_turns, max_budget, timeout, max_tokens_total),
        demo_task(scenario, children),
        as_json,
        store_path,
        spans,
    )


@main.command("run")
@click.argument("task")
@click.option(
    "--base-url",
    envvar=["OPENAI_BASE_URL", "LLM_BASE_URL"],
    show_envvar=True,
    required=True,
    metavar="URL",
    help="The OpenAI-compatible endpoint, e.g. http://localhost:8080/v1.",
)
@api_key_option
@click.option("--model", required=True, metavar="NAME", help="The model name the endpoint expects.")
@click.option(
    "--instructions",
    default="",
    metavar="TEXT",
    help="The system message: who the agent is and how it works. [default: none]",
)
@click.option(
    "--tools",
    type=ToolNames(),
    default=",".join(READ_ONLY_TOOLS),
    show_default=True,
    help="Catalog tools to offer, by name or first word: list_files, read_file, "
    "delete_file (asks a human first), scan_archive (the demo's canned slow scan).",
)
@click.option("--dedupe", is_flag=True, help="Answer repeated read-only calls from the transcript.")
@click.option("--max-turns", type=TURNS, default=20, show_default=True, help="Model calls.")
@max_budget_option("USD for the whole tree (needs prices: see --price-in).")
@timeout_option("Seconds for the whole tree.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True),
    default=".",
    show_default=True,
    help="The sandbox: the only directory the tools see (said on stderr at the start).",
)
@trace_option
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
    help="Seconds to wait for one model reply (a local model on a CPU is slow).",
)
@click.option(
    "--max-tokens",
    type=count(1_000_000, low=1),
    default=RUN_MAX_TOKENS,
    show_default=True,
    help="Most tokens per reply (the budget may lower it).",
)
@store_option
@json_option
@otlp_options
@tokens_option
@money_options
@mcp_options
def run_command(
    task: str,
    base_url: str,
    api_key: str,
    model: str,
    instructions: str,
    tools: tuple[str, ...],
    dedupe: bool,
    max_turns: int,
    max_budget: float | None,
    max_tokens_total: int | None,
    money: Money,
    recover_tool_calls: bool,
    request_timeout: float,
    max_tokens: int,
    timeout: float | None,
    directory: str,
    trace: str | None,
    store_path: str | None,
    as_json: bool,
    otlp: bool,
    otlp_protocol: str | None,
    otlp_endpoint: str | None,
    provider_name: str | None,
    capture_content: bool,
    mcp_commands: tuple[str, ...],
    mcp_urls: tuple[str, ...],
) -> None:
    """Run TASK with the file catalog against any OpenAI-compatible endpoint.

    The endpoint and key may come from $OPENAI_BASE_URL and $OPENAI_API_KEY.
    The tools see only the sandbox directory (--dir, the current one by
    default); they read only, unless --tools offers delete_file. Everything
    but the key is saved with the run, so `orchestra resume` rebuilds the same
    agent.
    """
    from ._cli.session import Session

    recipe = Recipe(
        directory=str(Path(directory).resolve()),
        base_url=base_url,
        model=model,
        instructions=instructions,
        tools=tools,
        dedupe=dedupe,
        recover_tool_calls=recover_tool_calls,
        request_timeout=request_timeout,
        max_tokens=max_tokens,
        provider_name=provider_name,
        mcp=(*mcp_commands, *mcp_urls),
        **_money_fields(money),
    )
    click.echo(f"sandbox: {recipe.directory} (tools: {', '.join(tools)})", err=True)
    tracer, spans = _tracing(otlp, otlp_protocol, otlp_endpoint, capture_content)
    session = Session(
        recipe=recipe,
        store=_store(store_path),
        trace=trace,
        api_key=api_key,
        tracer=tracer,
        live=not as_json,
    )
    limits = _limits(max_turns, max_budget, timeout, max_tokens_total)
    _start(session, limits, task, as_json, store_path, spans)


@main.command()
@click.argument("run_id")
@click.option("--max-turns", type=TURNS, default=None, help="Raise the turn limit.")
@max_budget_option("Raise the budget (USD, whole tree).")
@timeout_option("A new deadline: seconds from now.")
@api_key_option
@trace_option
@store_option
@json_option
@otlp_options
@tokens_option
def resume(
    run_id: str,
    max_turns: int | None,
    max_budget: float | None,
    timeout: float | None,
    max_tokens_total: int | None,
    api_key: str,
    trace: str | None,
    store_path: str | None,
    as_json: bool,
    otlp: bool,
    otlp_protocol: str | None,
    otlp_endpoint: str | None,
    provider_name: str | None,
    capture_content: bool,
) -> None:
    """Continue a stopped run (after an approval, a cancel, a crash or a raised limit)."""
    from ._cli.session import Session
    from ._model.tokens import encoding

    store, state = _loaded(store_path, run_id)
    if _distributed(store_path):
        _requeue(store_path, state, (max_turns, max_budget, timeout, max_tokens_total), as_json)
        return
    if state.parent_id is not None:
        raise CommandError(
            f"run {state.run_id} is a child run; resume its tree from the root: "
            f"orchestra resume {state.root_id}{_store_flag(store_path)}"
        )
    raised = _raised(state.limits, max_turns, max_budget, timeout, max_tokens_total)
    recipe = Recipe.of(state)
    if provider_name is not None:
        recipe = attrs.evolve(recipe, provider_name=provider_name)
    tracer, spans = _tracing(otlp, otlp_protocol, otlp_endpoint, capture_content)
    session = Session(
        recipe=recipe, store=store, trace=trace, api_key=api_key, tracer=tracer, live=not as_json
    )
    encoding()

    async def go(runner: Any, mcp_tools: Any) -> Any:
        return await runner.resume(
            state.run_id,
            recipe.agent(state.limits, mcp_tools),
            limits=raised,
            note="raised from the command line" if raised else "",
        )

    result, elapsed = _drive(session, state.run_id, go)
    _finish(result, session, elapsed, as_json, store_path, spans)


def _requeue(
    store_path: str | None, state: RunState, raises: tuple[Any, ...], as_json: bool
) -> None:
    """Resume a tree the workers execute: queue its root again."""
    from .distributed._cli import requeue

    if any(value is not None for value in raises):
        raise CommandError("raising limits of a run the workers execute is not supported yet")
    assert store_path is not None
    workflow = requeue(store_path, state.root_id)
    if as_json:
        click.echo(json.dumps({"run_id": state.root_id, "queued": workflow}))
    else:
        click.echo(f"queued {state.root_id} (workflow {workflow}): the workers continue it")


def _raised(
    limits: Limits,
    max_turns: int | None,
    max_budget: float | None,
    timeout: float | None,
    max_tokens_total: int | None,
) -> Limits | None:
    """The limits a resume raises to, or None if none was given."""
    if (max_turns, max_budget, timeout, max_tokens_total) == (None, None, None, None):
        return None
    return Limits(
        max_turns=limits.max_turns if max_turns is None else max_turns,
        max_budget_usd=limits.max_budget_usd if max_budget is None else max_budget,
        timeout_s=timeout,
        deadline=limits.deadline if timeout is None else None,
        max_tokens_total=limits.max_tokens_total if max_tokens_total is None else max_tokens_total,
    )


def _decision(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def wrapper(run_id: str, store_path: str | None, as_json: bool, **kw: Any) -> None:
        store = _store(store_path)
        root = store.resolve(run_id)
        waiting = fn(store, root, **kw)
        if _distributed(store_path):
            assert store_path is not None
            from .distributed._cli import requeue

            queued = requeue(store_path, root)
            click.echo(
                json.dumps({"run_id": root, "decided": fn.__name__, "queued": queued})
                if as_json
                else f"{fn.__name__}d call {waiting['call_id']} in run {waiting['run_id']}; "
                f"queued {queued}: the workers continue it"
            )
            return
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "run_id": root,
                        "decided": fn.__name__,
                        "call": json.loads(json.dumps(waiting, default=str)),
                    }
                )
            )
            return
        click.echo(
            f"{fn.__name__}: {waiting['tool']} {json.dumps(waiting['arguments'])} "
            f"(call {waiting['call_id']} in run {waiting['run_id']})"
        )
        click.echo(f"next: orchestra resume {root}{_store_flag(store_path)}")

    return wrapper


@main.command()
@click.argument("run_id")
@click.argument("call_id", required=False)
@store_option
@json_option
@_decision
def approve(store: DurableStore, run_id: str, call_id: str | None = None) -> dict[str, Any]:
    """Approve the call RUN_ID waits on (bound to its exact arguments)."""
    from ._approval import approve as decide

    return _as_dict(decide(store, run_id, call_id))


@main.command()
@click.argument("run_id")
@click.argument("call_id", required=False)
@click.option("--reason", default="", help="Written into the transcript as the call's result.")
@store_option
@json_option
@_decision
def reject(
    store: DurableStore, run_id: str, call_id: str | None = None, reason: str = ""
) -> dict[str, Any]:
    """Reject the call RUN_ID waits on; the model is told why."""
    from ._approval import reject as decide

    return _as_dict(decide(store, run_id, call_id, reason))


def _as_dict(obj: Any) -> dict[str, Any]:
    return dict(obj.to_dict())


@main.command()
@click.argument("run_id")
@click.option(
    "--reason",
    default="cancelled from the command line",
    show_default=True,
    help="Recorded as the reason the tree stopped.",
)
@click.option(
    "--wait",
    "wait_s",
    type=SECONDS,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds to wait for the running process to stop the tree.",
)
@store_option
@json_option
def cancel(run_id: str, reason: str, wait_s: float, store_path: str | None, as_json: bool) -> None:
    """Cancel a run tree that is running in another process (or on workers)."""
    if _distributed(store_path):
        assert store_path is not None
        _cancel_everywhere(store_path, run_id, reason, wait_s, as_json)
        return
    store = _store(store_path)
    target = store.resolve(run_id)
    state = store.load(target)
    if state.status is not Status.RUNNING:
        raise CommandError(f"run {target} is not running: it ended {state.status.value}")
    asked = time.monotonic()
    if store.lease_holder(state.root_id) is None:
        _cancel_unowned(store, state, reason, as_json, store_path)
        return
    store.request_cancel(target, reason)
    while store.load(target).status is Status.RUNNING:
        if time.monotonic() - asked > wait_s:
            store.clear_cancel(target)
            raise CommandError(
                f"no process stopped run {target} within {wait_s:g} s; the request was "
                "withdrawn (try again, or stop the process)"
            )
        time.sleep(0.005)
    ms = (time.monotonic() - asked) * 1000
    state = store.load(target)
    out = {
        "run_id": target,
        "status": state.status.value,
        "reason": state.reason,
        "stopped_after_ms": round(ms, 1),
    }
    click.echo(
        json.dumps(out)
        if as_json
        else f"{target} {state.status.value} ({state.reason}) {ms:.0f} ms after the request"
    )


def _cancel_everywhere(
    store_path: str, run_id: str, reason: str, wait_s: float, as_json: bool
) -> None:
    """Cancel a tree on every worker; one line (or JSON) saying how it went."""
    from .distributed._cli import cancel_everywhere

    store = _store(store_path)
    target = store.resolve(run_id)
    out = cancel_everywhere(store_path, target, reason, wait_s)
    if as_json:
        click.echo(json.dumps(out))
    else:
        runs = ", ".join(f"{n} {status}" for status, n in sorted(out["runs"].items()))
        click.echo(f"{out['root_id']}: {runs} ({out['stopped_after_ms']:.0f} ms)")
    if out["still_running"]:
        raise CommandError(
            f"{len(out['still_running'])} run(s) still running after {wait_s:g} s; their "
            "workers stop them when they next look (or when declared dead)"
        )


def _cancel_unowned(
    store: DurableStore, state: RunState, reason: str, as_json: bool, store_path: str | None
) -> None:
    """Stop a run whose process died: recorded in the store, nothing left armed."""
    from ._approval import cancel_unowned

    owner = f"pid {os.getpid()} on {socket.gethostname()}"
    stopped = cancel_unowned(store, state.run_id, reason, owner)
    note = "no process was running it (its process had stopped)"
    if as_json:
        out = {"run_id": state.run_id, "status": "interrupted", "reason": reason}
        click.echo(json.dumps({**out, "stopped": stopped, "note": note}))
        return
    how_many = f"{len(stopped)} run" if len(stopped) == 1 else f"{len(stopped)} runs"
    click.echo(f"{state.run_id} interrupted ({reason}): {note}; {how_many} stopped")
    click.echo(f"next: orchestra resume {state.root_id}{_store_flag(store_path)}")


@main.command()
@click.option(
    "--limit", type=count(10_000, low=1), default=20, show_default=True, help="Most runs to list."
)
@click.option("--all", "all_runs", is_flag=True, help="Children too, not just roots.")
@store_option
@json_option
def runs(limit: int, all_runs: bool, store_path: str | None, as_json: bool) -> None:
    """Recent runs."""
    states = _store(store_path).list_runs(limit=limit, roots_only=not all_runs)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "run_id": s.run_id,
                        "agent": s.agent,
                        "status": s.status.value,
                        "turns": s.turns,
                        "cost_usd": s.own.cost_usd,
                        "tree_cost_usd": s.tree.cost_usd,
                        "updated_at": s.updated_at,
                        "parent_id": s.parent_id,
                    }
                    for s in states
                ]
            )
        )
    else:
        print_runs(states)


@main.command()
@click.argument("run_id")
@store_option
@json_option
def show(run_id: str, store_path: str | None, as_json: bool) -> None:
    """A run's tree with status and costs, and the call it waits on if any."""
    from ._cli.session import report, tree_result

    store, state = _loaded(store_path, run_id)
    result = tree_result(store.tree(state.root_id), state.run_id)
    directory = Recipe.of(state).directory if state.metadata else None
    out = report(result, store, None, directory)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    print_tree(out)
    print_waiting(out, _store_flag(store_path))


@main.command()
@click.argument("run_id")
@store_option
@json_option
def trace(run_id: str, store_path: str | None, as_json: bool) -> None:
    """A run tree's events, in order (JSON lines)."""
    store, state = _loaded(store_path, run_id)
    events = (
        store.events(root_id=state.root_id)
        if state.parent_id is None
        else store.events(run_id=state.run_id)
    )
    if as_json:
        click.echo(json.dumps(events))
    else:
        for event in events:
            click.echo(json.dumps(event, sort_keys=False))


@main.command("console")
@click.option(
    "--port",
    type=count(65535),
    default=8421,
    show_default=True,
    help="Port on 127.0.0.1 (0: any free one; the URL says which).",
)
@store_option
def console_command(port: int, store_path: str | None) -> None:
    """Serve the web console on 127.0.0.1 until Ctrl-C (or SIGTERM).

    Recent runs; each tree live with its costs against its budgets, the
    transcript and events of every run; buttons to approve or reject a call,
    resume a tree and stop a running one. Resumes it started stop with it
    (saved, resumable). Needs: pip install 'orchestra[console]'.
    """
    from .console import missing_packages

    missing = missing_packages()
    if missing:
        raise CommandError(
            f"the console needs {' and '.join(missing)}: pip install 'orchestra[console]'"
        )
    from .console._server import bind, run_console

    store = _store(store_path)
    try:
        sock = bind(port)
    except OSError as exc:
        raise CommandError(f"cannot serve on 127.0.0.1:{port}: {_reason(exc)}") from exc
    run_console(store=store, sock=sock)


@main.command("worker")
@click.option(
    "--store",
    "database",
    envvar="ORCHESTRA_DATABASE_URL",
    required=True,
    metavar="URL",
    help="The PostgreSQL database of the runs (postgresql://…; env ORCHESTRA_DATABASE_URL).",
)
@click.option("--id", "executor_id", default=None, help="This worker's name (default: host-pid).")
@click.option(
    "--concurrency",
    type=count(1024, 1),
    default=4,
    show_default=True,
    help="Runs executed here at once.",
)
@click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help="Model endpoint of runs submitted from Python (default: the embedded scripted one).",
)
@click.option(
    "--dead-after",
    "dead_after_s",
    type=Number(min=0.5, max=3600.0),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="A worker silent this long is dead: its runs continue on the others.",
)
@api_key_option
def worker_command(
    database: str,
    executor_id: str | None,
    concurrency: int,
    base_url: str | None,
    dead_after_s: float,
    api_key: str,
) -> None:
    """Execute queued runs from a PostgreSQL database until Ctrl-C (or SIGTERM).

    Start as many as you like, on any machine that reaches the database: each
    takes runs and child runs from the queue; `orchestra demo|run --store
    postgresql://…` submits, `orchestra cancel|approve|reject|resume --store
    postgresql://…` act on trees wherever they run. Needs: pip install
    'orchestra[distributed]'.
    """
    from .distributed._cli import is_database, missing, run_worker

    problem = missing()
    if problem is not None:
        raise CommandError(f"the worker needs {problem}")
    if not is_database(database):
        raise CommandError(f"--store must be a postgresql:// URL, got {database!r}")
    run_worker(database, executor_id, concurrency, base_url, api_key, dead_after_s)


@main.group("mcp")
def mcp_group() -> None:
    """Look at MCP servers (needs the mcp extra: pip install 'orchestra[mcp]')."""


@mcp_group.command("list")
@click.argument("server")
@json_option
def mcp_list(server: str, as_json: bool) -> None:
    """List the tools of SERVER (a command to start, or an http(s) URL) with the
    flags Orchestra derives from their hints: read-only, needs approval, idempotent."""
    import trio

    from ._cli.recipe import Recipe

    async def tools() -> Any:
        async with Recipe(directory=".", mcp=(server,)).mcp_tools() as found:
            return found

    found = trio.run(tools)
    if as_json:
        keys = ("name", "read_only", "needs_approval", "idempotent", "description")
        click.echo(json.dumps([{k: getattr(t, k) for k in keys} for t in found], sort_keys=True))
        return
    from .mcp._convert import describe

    for tool in found:
        click.echo(describe(tool))


@main.command("serve-scripted")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=count(65535),
    default=8000,
    show_default=True,
    help="Port to listen on (0: any free one; the URL says which).",
)
@click.option(
    "--latency-ms",
    type=Number(max=600_000.0),
    default=0.0,
    show_default=True,
    metavar="MS",
    help="Milliseconds to wait before each reply.",
)
def serve_scripted_command(host: str, port: int, latency_ms: float) -> None:
    """Serve the scripted provider over HTTP until Ctrl-C (or SIGTERM).

    Its URL is printed on stderr; each request's model names the scenario.
    """
    import signal

    import trio

    from ._scripted.server import serve_scripted

    async def serve() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    url = await nursery.start(
                        lambda task_status: serve_scripted(
                            host=host, port=port, latency=latency_ms / 1000, task_status=task_status
                        )
                    )
                except OSError as exc:
                    raise CommandError(f"cannot serve on {host}:{port}: {_reason(exc)}") from exc
                click.echo(f"scripted provider at {url}", err=True)
                async for signum in signals:
                    click.echo(f"{signal.Signals(signum).name}: stopped", err=True)
                    nursery.cancel_scope.cancel()
                    break

    trio.run(serve)


def _reason(exc: OSError) -> str:
    """An OS error in words, without its errno: ``address already in use``."""
    text = exc.strerror or str(exc)
    return text.rpartition("): ")[2] if "): " in text else text


def run() -> None:
    """Entry point: every error becomes one line ``error: …`` and its exit code
    (see :mod:`orchestra._cli.errors`)."""
    main(prog_name="orchestra")
