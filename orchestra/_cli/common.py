"""Options that several commands share, each written once.

``demo``, ``run`` and ``resume`` report a tree the same way (:class:`Reporting`:
``--trace``, ``--store``, ``--json``, ``--otlp``…); ``demo`` and ``run`` limit
and price it the same way (:class:`TreeOptions`: ``--max-budget``,
``--timeout``, ``--max-tokens-budget``, prices, ``--dedupe``, ``--mcp``…). A
bundle's options reach the command as one frozen object, not as a dozen
parameters.

This module is imported by ``orchestra --help``: it imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

import attrs
import click

from .._recipes.money import Money
from .._settings import ModelSettings
from .._telemetry.otlp_protocol import PROTOCOLS
from .options import PRICE, SECONDS, TOKENS, TURNS, USD, JsonObject, Number, OutputFile, count
from .stores import store_option

__all__ = [
    "Reporting",
    "TreeOptions",
    "api_key_option",
    "json_option",
    "provider_option",
    "reporting_options",
    "saved_run_key_option",
    "tokens_option",
    "tree_options",
]

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
T = TypeVar("T")

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
continue_option = click.option(
    "--continue",
    "continue_from",
    metavar="RUN_ID",
    default=None,
    help="Continue that stopped run (in --store) with TASK as the next user message: a new "
    "run with its transcript, fresh limits (they count per message).",
)


def bundled(keyword: str, cls: type[T], options: Sequence[Decorator]) -> Decorator:
    """A decorator adding ``options`` to a command that receives their values
    as one ``cls`` instance in ``keyword`` (``cls``'s fields name the values)."""
    names = [field.name for field in attrs.fields(cls)]  # type: ignore[arg-type]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = cls(**{name: kwargs.pop(name) for name in names})
            return fn(*args, **{keyword: value}, **kwargs)

        command: Callable[..., Any] = wrapper
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def api_key_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--api-key`` of a command that starts a run (never saved; by default the
    provider's own variable, so that one vendor's key never goes to another)."""
    return click.option(
        "--api-key",
        default="",
        metavar="KEY",
        help="Key for the endpoint; never saved with the run. [default: $OPENAI_API_KEY, "
        "or $ANTHROPIC_API_KEY with --provider anthropic]",
    )(fn)


def saved_run_key_option(
    fn: Callable[..., Any], *, said: str = "Key for the runs' endpoint"
) -> Callable[..., Any]:
    """``--api-key`` of a command that goes on with saved runs (``resume``, ``worker``,
    ``approve --resume``): by default the variable of the provider each run was
    started with (``said``: how the help begins)."""
    return click.option(
        "--api-key",
        default="",
        metavar="KEY",
        help=f"{said}; never saved. [default: $OPENAI_API_KEY, or "
        "$ANTHROPIC_API_KEY for a run on Anthropic's API]",
    )(fn)


WIRES = {
    "chat": "chat",
    "openai": "chat",
    "responses": "responses",
    "openai-responses": "responses",
    "anthropic": "anthropic",
}
"""The names ``--provider`` takes, and the wire format each means."""


def provider_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--provider``: the wire format of the tree's model calls (None if not given:
    a model written ``NAME:MODEL`` may name it, else Chat Completions)."""
    return click.option(
        "--provider",
        "wire",
        type=click.Choice(list(WIRES)),
        default=None,
        callback=lambda _ctx, _param, value: None if value is None else WIRES[value],
        help="The API the model calls speak: Chat Completions (chat or openai; any "
        "compatible server), OpenAI's Responses (responses or openai-responses) or "
        "Anthropic's Messages (anthropic). [default: chat, or what --model's NAME: says]",
    )(fn)


def max_budget_option(help_text: str) -> Decorator:
    """``--max-budget`` in USD (finite, at most a million)."""
    return click.option("--max-budget", type=USD, default=None, metavar="USD", help=help_text)


def timeout_option(help_text: str) -> Decorator:
    """``--timeout`` in seconds (finite)."""
    return click.option("--timeout", type=SECONDS, default=None, metavar="SECONDS", help=help_text)


tokens_option = click.option(
    "--max-tokens-budget",
    "max_tokens_total",
    type=TOKENS,
    default=None,
    help="Tokens (prompt + completion) for the whole tree; needs no prices.",
)

shape_options = [
    click.option(
        "--max-depth",
        type=count(10**6),
        default=None,
        metavar="N",
        help="Levels of runs below the root (0: no children).",
    ),
    click.option(
        "--max-children",
        type=count(10**6),
        default=None,
        metavar="N",
        help="Children each run may start; a call over it is told why, and the run goes on.",
    ),
    click.option(
        "--max-descendants",
        type=count(10**6),
        default=None,
        metavar="N",
        help="Runs the whole tree may hold below the root.",
    ),
    click.option(
        "--max-concurrent-children",
        type=click.IntRange(1, 10**6),
        default=None,
        metavar="N",
        help="Children of one run running at once (the others wait).",
    ),
]

money_options = bundled(
    "money",
    Money,
    [
        click.option(
            "--price-in",
            type=PRICE,
            default=None,
            metavar="USD",
            help="USD per million input tokens. [default: the model's known price, else assumed]",
        ),
        click.option(
            "--price-out",
            type=PRICE,
            default=None,
            metavar="USD",
            help="USD per million output tokens (reasoning tokens are output).",
        ),
        click.option(
            "--price-cached",
            type=PRICE,
            default=None,
            metavar="USD",
            help="USD per million input tokens read from the provider's cache. "
            "[default: as --price-in]",
        ),
        click.option(
            "--margin-ratio",
            type=Number(max=10.0),
            default=0.0,
            help="Least extra share of our prompt count to reserve (the margin is also learnt).",
        ),
        click.option(
            "--margin-tokens",
            type=count(10**7),
            default=0,
            help="Least extra prompt tokens to reserve per call.",
        ),
    ],
)


@attrs.frozen(kw_only=True)
class Reporting:
    """Where a command that runs a tree reports it: trace file, store, JSON, spans."""

    trace: str | None
    store_path: str | None
    as_json: bool
    json_events: bool
    otlp: bool
    otlp_protocol: str | None
    otlp_endpoint: str | None
    provider_name: str | None
    capture_content: bool

    @classmethod
    def plain(cls, store_path: str | None, as_json: bool) -> Reporting:
        """A tree reported to the store ``store_path`` and on stdout, nothing more
        (a command without the reporting options: ``approve --resume``)."""
        return cls(
            trace=None,
            store_path=store_path,
            as_json=as_json,
            json_events=False,
            otlp=False,
            otlp_protocol=None,
            otlp_endpoint=None,
            provider_name=None,
            capture_content=False,
        )


reporting_options = bundled(
    "reporting",
    Reporting,
    [
        click.option(
            "--trace",
            type=OutputFile(),
            default=None,
            metavar="FILE",
            help="Append the run's events to FILE as JSON lines (- for stderr).",
        ),
        store_option,
        json_option,
        click.option(
            "--json-events",
            is_flag=True,
            help="Print every event of the tree as it happens, text deltas of streamed "
            'replies included, as JSON lines on stdout; the report last ("type": "report").',
        ),
        click.option("--otlp", is_flag=True, help="Export OpenTelemetry spans over OTLP."),
        click.option(
            "--otlp-protocol",
            type=click.Choice(PROTOCOLS),
            default=None,
            help="Overrides OTEL_EXPORTER_OTLP_PROTOCOL.",
        ),
        click.option(
            "--otlp-endpoint",
            default=None,
            metavar="URL",
            help="Overrides OTEL_EXPORTER_OTLP_ENDPOINT.",
        ),
        click.option(
            "--provider-name",
            default=None,
            metavar="NAME",
            help="gen_ai.provider.name on spans (default: from the endpoint's host, e.g. "
            "openai for api.openai.com); a resume keeps the one the run started with.",
        ),
        click.option(
            "--capture-content",
            is_flag=True,
            help="Record messages, tool arguments and results on spans (redacted, bounded; "
            "also OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true).",
        ),
    ],
)


@attrs.frozen(kw_only=True)
class Sampling:
    """How the tree's agents sample their replies (``--temperature`` and the rest)."""

    temperature: float | None
    top_p: float | None
    seed: int | None
    stop: tuple[str, ...]
    parallel_tool_calls: bool | None
    extra_body: dict[str, Any] | None

    def settings(self) -> ModelSettings:
        """These options as model settings (unset ones: the server's defaults).

        Raises:
            ConfigError: a value out of range (see :class:`~orchestra.ModelSettings`).
        """
        return ModelSettings(**attrs.asdict(self))


sampling_options = bundled(
    "sampling",
    Sampling,
    [
        click.option(
            "--temperature",
            type=float,
            default=None,
            metavar="T",
            help="Sampling temperature, 0 to 2 [default: the server's].",
        ),
        click.option(
            "--top-p",
            type=float,
            default=None,
            metavar="P",
            help="Nucleus sampling: the probability mass kept, above 0 up to 1.",
        ),
        click.option(
            "--seed", type=int, default=None, help="Ask for repeatable sampling (if served)."
        ),
        click.option(
            "--stop",
            multiple=True,
            metavar="TEXT",
            help="A sequence that ends a reply (repeatable, at most 4).",
        ),
        click.option(
            "--parallel-tool-calls/--no-parallel-tool-calls",
            default=None,
            help="Whether one reply may make several tool calls [default: the server's].",
        ),
        click.option(
            "--extra-body",
            type=JsonObject(),
            default=None,
            help='More request-body fields, as the server names them: \'{"user": "me"}\'.',
        ),
    ],
)


@attrs.frozen(kw_only=True)
class TreeOptions:
    """How a new tree is limited, priced and equipped (``demo`` and ``run`` alike)."""

    max_budget: float | None
    timeout: float | None
    max_tokens_total: int | None
    wind_down: int
    max_depth: int | None
    max_children: int | None
    max_descendants: int | None
    max_concurrent_children: int | None
    on_limit: str
    money: Money
    sampling: Sampling
    dedupe: bool
    mcp_commands: tuple[str, ...]
    mcp_urls: tuple[str, ...]
    mcp_reconcile: tuple[str, ...]

    @property
    def mcp(self) -> tuple[str, ...]:
        """Every MCP server, commands then URLs."""
        return (*self.mcp_commands, *self.mcp_urls)


tree_options = bundled(
    "tree",
    TreeOptions,
    [
        money_options,
        sampling_options,
        max_budget_option(
            "USD for the whole tree (priced by --price-in/--price-out, else the model's "
            "known price)."
        ),
        timeout_option("Seconds for the whole tree."),
        tokens_option,
        click.option(
            "--wind-down",
            type=count(10**6),
            default=128,
            show_default=True,
            metavar="TOKENS",
            help="Output tokens each run keeps for a final answer: at a limit (budget, "
            "last turn, deadline) it answers from what it has, marked partial. 0: off.",
        ),
        *shape_options,
        click.option(
            "--on-limit",
            type=click.Choice(["stop", "ask"]),
            default="stop",
            show_default=True,
            help="At the turn limit or a budget a run stops, or asks for more "
            "(interrupted: orchestra grant RUN_ID --turns N, --usd X or --tokens N, "
            "as it says, or reject), each child too.",
        ),
        click.option(
            "--dedupe", is_flag=True, help="Answer repeated read-only calls from the transcript."
        ),
        click.option(
            "--mcp",
            "mcp_commands",
            multiple=True,
            metavar="COMMAND",
            help="An MCP server to start, e.g. 'python examples/mcp_files.py DIR' (repeatable): "
            "its tools join the agent's, replacing catalog tools of the same name.",
        ),
        click.option(
            "--mcp-url",
            "mcp_urls",
            multiple=True,
            metavar="URL",
            help="An MCP server over streamable HTTP (repeatable).",
        ),
        click.option(
            "--mcp-reconcile",
            multiple=True,
            metavar="WRITE=CHECK",
            help="An MCP write tool and the tool of the same server that says whether a "
            "call of it took effect (repeatable): a write in doubt after a crash is "
            "settled by asking CHECK before anyone is asked.",
        ),
    ],
)


child_budget_option = click.option(
    "--child-budget",
    type=USD,
    default=0.05,
    show_default=True,
    metavar="USD",
    help="USD each research child may spend (its own tree).",
)
child_turns_option = click.option(
    "--child-turns",
    type=TURNS,
    default=8,
    show_default=True,
    help="Model calls each research child may make.",
)
