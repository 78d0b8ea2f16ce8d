"""Running a tree from a command until it stops, then reporting it.

``demo``, ``run`` and ``resume`` share this: tracing as ``--otlp`` asks,
the run id said on stderr as soon as the run exists, the tree run under
the session's supervision (signals, live view), then the report (a tree for
people, JSON with ``--json``) and the exit code of its status.

Modules that run trees (trio, the runner, the tokenizer, OpenTelemetry) are
imported inside the functions that need them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import click

from .._state import Limits
from .._views.exits import status_exit
from .._views.printed import print_tree, print_waiting
from .common import Reporting, TreeOptions
from .stores import is_distributed, new_store, store_flag

if TYPE_CHECKING:
    from .._recipes.recipe import Recipe
    from .._result import RunResult
    from .._runner import Runner
    from .._tools import Tool
    from .session import Session

__all__ = ["Go", "drive", "finish", "limits", "recipe", "session", "start", "tell_started"]

Go = Callable[["Runner", "tuple[Tool, ...]"], Awaitable["RunResult"]]


def limits(max_turns: int | None, tree: TreeOptions) -> Limits:
    """The limits of a new tree."""
    return Limits(
        max_turns=max_turns,
        max_budget_usd=tree.max_budget,
        timeout_s=tree.timeout,
        max_tokens_total=tree.max_tokens_total,
        wind_down_tokens=tree.wind_down or None,
        max_depth=tree.max_depth,
        max_children=tree.max_children,
        max_descendants=tree.max_descendants,
        max_concurrent_children=tree.max_concurrent_children,
        on_limit=None if tree.on_limit == "stop" else tree.on_limit,
    )


def recipe(tree: TreeOptions, reporting: Reporting, **fields: Any) -> Recipe:
    """A new tree's recipe: ``fields``, and what ``demo`` and ``run`` take alike from
    the shared options (dedupe, MCP servers, prices, the provider's name)."""
    from .._recipes.recipe import Recipe

    shared: dict[str, Any] = {
        "dedupe": tree.dedupe,
        "mcp": tree.mcp,
        "mcp_reconcile": tree.mcp_reconcile,
        "provider_name": reporting.provider_name,
        "settings": tree.sampling.settings().saved(),
        **attrs.asdict(tree.money),
    }
    return Recipe(**shared, **fields)


def session(
    recipe: Recipe,
    reporting: Reporting,
    *,
    store: Any = None,
    api_key: str = "",
    cancel_after: float | None = None,
    chunk_s: float = 0.0,
) -> tuple[Session, Any]:
    """The session that runs ``recipe`` as ``reporting`` says, and its spans (or None)."""
    from .session import Session

    tracer, spans = _tracing(reporting)
    made = Session(
        recipe=recipe,
        store=new_store(reporting.store_path) if store is None else store,
        trace=reporting.trace,
        api_key=api_key,
        cancel_after=cancel_after,
        chunk_s=chunk_s,
        tracer=tracer,
        live=not (reporting.as_json or reporting.json_events),
        json_events=reporting.json_events,
    )
    return made, spans


def _tracing(reporting: Reporting) -> tuple[Any, Any]:
    if not reporting.otlp:
        return None, None
    from .._telemetry.otel import OTelTracer, configure_otlp

    provider = configure_otlp(protocol=reporting.otlp_protocol, endpoint=reporting.otlp_endpoint)
    capture = True if reporting.capture_content else None  # None: the environment decides
    return OTelTracer(tracer_provider=provider, capture_content=capture), provider


def tell_started(run_id: str, reporting: Reporting) -> None:
    """Say on stderr, at once, which run this is and how to stop it from elsewhere
    (two lines, so that each fits 80 columns)."""
    click.echo(f"run {run_id} started", err=True)
    click.echo(
        f"  stop it with: orchestra cancel {run_id}{store_flag(reporting.store_path)}", err=True
    )


def start(
    session: Session,
    tree_limits: Limits,
    task: str,
    reporting: Reporting,
    spans: Any,
    continue_from: str | None = None,
) -> None:
    """Run ``task`` as a new tree (here, or on the workers of a PostgreSQL store);
    with ``continue_from`` (a whole run id: see :mod:`.conversation`), as the next
    message of that run's conversation (here only)."""
    from .._conversation import refuse_to_continue
    from .._core.execute import new_run_id
    from .._model.tokens import encoding

    if is_distributed(reporting.store_path):
        from ..distributed._cli import submit_and_follow
        from .session import followed

        assert reporting.store_path is not None
        with followed(session) as sink:
            result, ms = submit_and_follow(
                reporting.store_path, session.recipe, tree_limits, task, sink
            )
        finish(result, session, ms, reporting, spans)
        return
    encoding()  # load the tokenizer before the clock starts
    root_id = new_run_id()

    async def go(runner: Runner, mcp_tools: tuple[Tool, ...]) -> RunResult:
        agent = session.recipe.agent(tree_limits, mcp_tools)
        if continue_from is not None:  # said before the run is: a wrong id starts nothing
            refuse_to_continue(runner.store.load(continue_from), agent.name)
        tell_started(root_id, reporting)
        return await runner.run(
            agent,
            task,
            run_id=root_id,
            metadata=session.recipe.metadata(),
            continue_from=continue_from,
        )

    result, elapsed = drive(session, root_id, go)
    finish(result, session, elapsed, reporting, spans)


def drive(session: Session, root_id: str, go: Go) -> tuple[RunResult, float]:
    """Run ``go`` under the session's supervision on trio; its result and elapsed ms."""
    import trio

    from .session import supervise

    return trio.run(supervise, session, root_id, go)


def finish(
    result: RunResult, session: Session, elapsed: float | None, reporting: Reporting, spans: Any
) -> None:
    """Print the tree's report (and send its last spans), then exit with its status."""
    from .._views.report import report

    recipe = session.recipe
    out = report(result, session.store, elapsed, recipe.directory, recipe.base_url)
    if reporting.json_events:
        click.echo(json.dumps({"type": "report", **out}, sort_keys=True))
    elif reporting.as_json:
        if spans is not None:
            out["spans_exported"] = _export_spans(spans)
        click.echo(json.dumps(out, sort_keys=True))
    else:
        print_tree({**out, "trace_id": None})  # said below, once its spans are sent
        print_waiting(out, store_flag(reporting.store_path))
        sys.stdout.flush()  # the result shows now; exporting the last spans may take longer
        if spans is not None:
            exported = _export_spans(spans)
            click.echo(f"trace: {out['trace_id']}" if exported else "trace: not exported")
    sys.exit(status_exit(result.status))


def _export_spans(spans: Any) -> bool:
    """Send the last spans, for 2 s at most; if they were not exported, say why on stderr."""
    from .._telemetry.otel import finish_export

    why = finish_export(spans)
    if why is not None:
        click.echo(f"warning: spans were not exported: {why}", err=True)
    return why is None
