"""The ``orchestra`` command line.

Every command takes ``--store PATH`` (default: ``$ORCHESTRA_STORE`` or the
user data directory), so a run started in one process can be shown, approved,
cancelled and resumed from another.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import attrs
import click
import stamina.instrumentation
import trio
from click.shell_completion import CompletionItem

from ._cli_money import Money, money_options, tokens_option
from ._cli_output import print_runs, print_tree, print_waiting
from ._cli_recipe import RUN_MAX_TOKENS, RUN_TIMEOUT_S, Recipe
from ._cli_session import EXIT_CODES, Session, report, supervise, tree_result
from ._demo import SCENARIOS, demo_task, parse_scenario
from ._exceptions import OrchestraError
from ._execute import new_run_id
from ._otlp_child import PROTOCOLS
from ._sqlite import SQLiteStore
from ._state import Limits, RunState, Status
from ._tokens import encoding

__all__ = ["main", "run"]


def _store(path: str | None) -> SQLiteStore:
    return SQLiteStore(path)


def _loaded(store_path: str | None, run_id: str) -> tuple[SQLiteStore, RunState]:
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
    help="Run store (SQLite). Default: $ORCHESTRA_STORE or the user data directory.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


def otlp_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--otlp``: export spans over OTLP (standard ``OTEL_*`` variables apply)."""
    fn = click.option(
        "--otlp-endpoint", default=None, help="Overrides OTEL_EXPORTER_OTLP_ENDPOINT."
    )(fn)
    fn = click.option(
        "--otlp-protocol",
        type=click.Choice(PROTOCOLS),
        default=None,
        help="Overrides OTEL_EXPORTER_OTLP_PROTOCOL.",
    )(fn)
    return click.option("--otlp", is_flag=True, help="Export OpenTelemetry spans over OTLP.")(fn)


def _tracing(otlp: bool, protocol: str | None, endpoint: str | None) -> tuple[Any, Any]:
    if not otlp:
        return None, None
    from ._otel import OTelTracer, configure_otlp

    provider = configure_otlp(protocol=protocol, endpoint=endpoint)
    return OTelTracer(tracer_provider=provider), provider


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
    from .testing import make_sandbox

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
    out = report(result, session.store, elapsed, session.recipe.directory)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
    else:
        print_tree(out)
        print_waiting(out, _store_flag(store_path))
    sys.stdout.flush()  # the result shows now; exporting the last spans may take longer
    if spans is not None:
        spans.shutdown()  # the export process sends the rest, then exits
    sys.exit(EXIT_CODES[result.status])


def _start(
    session: Session,
    limits: Limits,
    task: str,
    as_json: bool,
    store_path: str | None,
    spans: Any = None,
) -> None:
    encoding()  # load the tokenizer before the clock starts
    agent = session.recipe.agent(limits)
    root_id = new_run_id()

    async def go(runner: Any) -> Any:
        return await runner.run(agent, task, run_id=root_id, metadata=session.recipe.metadata())

    result, elapsed = trio.run(supervise, session, root_id, go)
    _finish(result, session, elapsed, as_json, store_path, spans)


class ScenarioType(click.types.StringParamType):
    """A demo scenario, optionally with fault modifiers: ``plan``, ``plan+429x3``."""

    name = "scenario"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "{" + "|".join(SCENARIOS) + "}[+FAULT[xN]...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        name = super().convert(value, param, ctx)
        try:
            parse_scenario(name)
        except OrchestraError as exc:
            self.fail(str(exc), param, ctx)
        return name

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return [CompletionItem(s) for s in SCENARIOS if s.startswith(incomplete)]


@click.group()
def main() -> None:
    """Orchestra: LLM agents as governed trees."""
    # Retries are reported as model_retry events and summarised; stamina's own
    # log line per retry would only repeat them on stderr.
    stamina.instrumentation.set_on_retry_hooks([])


@main.command()
@click.argument("scenario", type=ScenarioType())
@click.option(
    "--max-turns",
    type=click.IntRange(min=0),
    default=None,
    help="Model calls for the whole tree. [default: 20; slow_tree: 2 + 2 per child]",
)
@click.option("--max-budget", type=click.FloatRange(min=0), default=None, help="USD, whole tree.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="Seconds, whole tree.")
@click.option("--child-budget", type=click.FloatRange(min=0), default=0.05, show_default=True)
@click.option("--child-turns", type=click.IntRange(min=0), default=8, show_default=True)
@click.option("--children", type=click.IntRange(1, 100), default=None, help="slow_tree: how many.")
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
    type=click.FloatRange(min=0),
    default=None,
    help="Press Stop after this many seconds.",
)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append JSONL events here (- for stderr).",
)
@store_option
@json_option
@otlp_options
@tokens_option
@money_options
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
) -> None:
    """Run SCENARIO against the embedded scripted provider.

    SCENARIO may add faults, SCENARIO+FAULT[xN]...: an HTTP status (429, 500,
    401, ...), hang, garbage, truncated, reset or nousage; the first N requests
    (default 1) meet each. `orchestra resume` plays no faults.
    """
    recipe = Recipe(
        directory=str(_sandbox(directory)),
        scenario=scenario,
        dedupe=dedupe,
        errors=errors,
        fatal_errors=fatal_errors,
        child_budget=child_budget,
        child_turns=child_turns,
        **_money_fields(money),
    )
    if max_turns is None:
        slow_tree = parse_scenario(scenario)[0] == "slow_tree"
        max_turns = 2 + 2 * (children or 3) if slow_tree else 20
    tracer, spans = _tracing(otlp, otlp_protocol, otlp_endpoint)
    session = Session(
        recipe=recipe,
        store=_store(store_path),
        trace=trace,
        cancel_after=cancel_after,
        tracer=tracer,
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
@click.option("--base-url", envvar=["OPENAI_BASE_URL", "LLM_BASE_URL"], required=True)
@click.option("--api-key", envvar="OPENAI_API_KEY", default="")
@click.option("--model", required=True)
@click.option("--max-turns", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--max-budget", type=click.FloatRange(min=0), default=None)
@click.option("--timeout", type=click.FloatRange(min=0), default=None)
@click.option("--dir", "directory", type=click.Path(file_okay=False, exists=True), default=".")
@click.option("--trace", type=click.Path(dir_okay=False), default=None)
@click.option(
    "--recover-tool-calls",
    is_flag=True,
    help="Read tool calls a model wrote as JSON text in its answer (declared tools only).",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=RUN_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for one model reply (a local model on a CPU is slow).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=RUN_MAX_TOKENS,
    show_default=True,
    help="Most tokens per reply (the budget may lower it).",
)
@store_option
@json_option
@otlp_options
@tokens_option
@money_options
def run_command(
    task: str,
    base_url: str,
    api_key: str,
    model: str,
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
) -> None:
    """Run TASK with the file catalog against any OpenAI-compatible endpoint."""
    recipe = Recipe(
        directory=str(Path(directory).resolve()),
        base_url=base_url,
        model=model,
        recover_tool_calls=recover_tool_calls,
        request_timeout=request_timeout,
        max_tokens=max_tokens,
        **_money_fields(money),
    )
    tracer, spans = _tracing(otlp, otlp_protocol, otlp_endpoint)
    session = Session(
        recipe=recipe, store=_store(store_path), trace=trace, api_key=api_key, tracer=tracer
    )
    limits = _limits(max_turns, max_budget, timeout, max_tokens_total)
    _start(session, limits, task, as_json, store_path, spans)


@main.command()
@click.argument("run_id")
@click.option("--max-turns", type=click.IntRange(min=0), default=None, help="Raise the turn limit.")
@click.option("--max-budget", type=click.FloatRange(min=0), default=None, help="Raise the budget.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="A new deadline.")
@click.option("--api-key", envvar="OPENAI_API_KEY", default="")
@click.option("--trace", type=click.Path(dir_okay=False), default=None)
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
) -> None:
    """Continue a stopped run (after an approval, a cancel, a crash or a raised limit)."""
    store, state = _loaded(store_path, run_id)
    if state.parent_id is not None:
        raise click.ClickException(
            f"run {state.run_id} is a child run; resume its tree from the root: "
            f"orchestra resume {state.root_id}{_store_flag(store_path)}"
        )
    raised = _raised(state.limits, max_turns, max_budget, timeout, max_tokens_total)
    recipe = Recipe.of(state)
    tracer, spans = _tracing(otlp, otlp_protocol, otlp_endpoint)
    session = Session(recipe=recipe, store=store, trace=trace, api_key=api_key, tracer=tracer)
    encoding()

    async def go(runner: Any) -> Any:
        return await runner.resume(
            state.run_id,
            recipe.agent(state.limits),
            limits=raised,
            note="raised from the command line" if raised else "",
        )

    result, elapsed = trio.run(supervise, session, state.run_id, go)
    _finish(result, session, elapsed, as_json, store_path, spans)


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
def approve(store: SQLiteStore, run_id: str, call_id: str | None = None) -> dict[str, Any]:
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
    store: SQLiteStore, run_id: str, call_id: str | None = None, reason: str = ""
) -> dict[str, Any]:
    """Reject the call RUN_ID waits on; the model is told why."""
    from ._approval import reject as decide

    return _as_dict(decide(store, run_id, call_id, reason))


def _as_dict(obj: Any) -> dict[str, Any]:
    return dict(obj.to_dict())


@main.command()
@click.argument("run_id")
@click.option("--reason", default="cancelled from the command line", show_default=True)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the running process to stop the tree.",
)
@store_option
@json_option
def cancel(run_id: str, reason: str, wait_s: float, store_path: str | None, as_json: bool) -> None:
    """Cancel a run tree that is running in another process."""
    store = _store(store_path)
    target = store.resolve(run_id)
    state = store.load(target)
    if state.status is not Status.RUNNING:
        raise click.ClickException(f"run {target} is not running ({state.status.value})")
    asked = time.monotonic()
    if store.lease_holder(state.root_id) is None:
        _cancel_unowned(store, state, reason, as_json, store_path)
        return
    store.request_cancel(target, reason)
    while store.load(target).status is Status.RUNNING:
        if time.monotonic() - asked > wait_s:
            store.clear_cancel(target)
            raise click.ClickException(
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


def _cancel_unowned(
    store: SQLiteStore, state: RunState, reason: str, as_json: bool, store_path: str | None
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
    click.echo(f"{state.run_id} interrupted ({reason}): {note}; {len(stopped)} run(s) stopped")
    click.echo(f"next: orchestra resume {state.root_id}{_store_flag(store_path)}")


@main.command()
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
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


@main.command("serve-scripted")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--latency-ms", type=click.FloatRange(min=0), default=0.0, show_default=True)
def serve_scripted_command(host: str, port: int, latency_ms: float) -> None:
    """Serve the scripted provider over HTTP until interrupted."""
    from .testing import serve_scripted

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve_scripted(
                    host=host, port=port, latency=latency_ms / 1000, task_status=task_status
                )
            )
            click.echo(f"scripted provider at {url}", err=True)

    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve)


def run() -> None:
    """Entry point: our errors become one clear line and exit code 2."""
    try:
        main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except OrchestraError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
