"""How the CLI rebuilds a run's agent and provider in any process.

A run started by ``orchestra demo`` or ``orchestra run`` saves its recipe in
``state.metadata``, so ``orchestra resume`` in a new process builds the same
agent over the same directory against the same kind of endpoint. The API key
is never saved.

A demo's scenario may carry fault modifiers (``plan+500x20``). The process
that starts the run plays them; a recipe read back from a saved run
(:meth:`Recipe.of`, i.e. ``orchestra resume``) starts its embedded server
with faults off: the outage is over.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._exceptions import ConfigError, StateError
from .._instructions import CATALOG_INSTRUCTIONS
from .._state import Limits, RunState
from .money import Money

if TYPE_CHECKING:  # imported where used: `orchestra --help` and `show` need none of them
    from .._agent import Agent, ToolPolicy
    from .._model.provider import HTTPProvider
    from .._settings import ModelSettings
    from .._tools import Tool
    from .calls import ModelCalls

__all__ = ["Recipe"]

_KEY = "orchestra.cli.recipe"
DEMO_TIMEOUT_S = 5.0
"""The demo provider's HTTP timeout: a ``hang`` fault costs this much per attempt."""
RUN_TIMEOUT_S = 600.0
"""``orchestra run``'s HTTP timeout: a local model on two CPU cores can take
minutes for one long reply (276 s seen for 1,024 tokens under load)."""
RUN_MAX_TOKENS = 1024
"""``orchestra run``'s default ``max_tokens`` per reply."""
RUN_INSTRUCTIONS = CATALOG_INSTRUCTIONS
"""``orchestra run``'s system message unless ``--instructions`` says otherwise."""
RESEARCH_TOOL = (
    "Hand one question to a researcher: a sub-agent with the same tools and a budget of "
    "its own, which answers it in a few sentences."
)
RESEARCH_NOTE = (
    "For a question with several parts, you may call research once per part (in one "
    "reply, so they run at once), then answer from what the researchers found."
)
"""What ``orchestra run --research`` adds to the root's system message."""
RESEARCHER_NOTE = "You are a researcher: answer the one question you are given, briefly."
SCRIPTED_PROVIDER = "orchestra.scripted"
"""``gen_ai.provider.name`` of the demos' embedded scripted server."""


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _tool_names(names: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(names)


@attrs.frozen(kw_only=True)
class Recipe:
    """What the CLI needs to (re)build a run's agent: a demo scenario or an endpoint."""

    directory: str
    scenario: str | None = None
    base_url: str | None = None
    model: str | None = None
    dedupe: bool = False
    errors: str = "detailed"
    fatal_errors: bool = False
    child_budget: float | None = 0.05
    child_turns: int | None = 8
    price_in: float | None = None
    price_out: float | None = None
    price_cached: float | None = None
    margin_ratio: float = 0.0
    margin_tokens: int = 0
    recover_tool_calls: bool = False
    request_timeout: float = RUN_TIMEOUT_S
    wait_for_server_s: float = 0.0
    """How long a refused connection to an endpoint that never answered is
    retried (``--wait-for-server``); 0: the run fails at once, naming the URL."""
    max_tokens: int = RUN_MAX_TOKENS
    instructions: str = ""
    """``orchestra run``'s system message (``--instructions``)."""
    tools: tuple[str, ...] | None = attrs.field(default=None, converter=_tool_names)
    """The catalog tools ``orchestra run`` offers, by name (``--tools``); None, as
    in recipes saved before ``--tools`` existed: all of them, as those runs had."""
    look_first: bool = False
    """Whether the model must call a tool before it may answer (``--look-first``)."""
    budget_note: bool = False
    """Whether each request tells the model what the run has left (``--budget-note``)."""
    provider_name: str | None = None
    """``gen_ai.provider.name`` on spans (``--provider-name``); None: the
    provider's default (``orchestra.scripted`` for a demo's embedded server)."""
    mcp: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """MCP servers whose tools the root agent gets (``--mcp`` commands, ``--mcp-url``
    URLs); a resume connects to them again."""
    settings: dict[str, Any] = attrs.field(factory=dict)
    """How every agent of the tree samples its replies (``--temperature``, ``--seed``,
    ...: :meth:`ModelSettings.saved`); empty: the server's defaults."""
    wire: str = "chat"
    """The API the tree's model calls speak (``--provider``): ``chat``, ``responses``
    or ``anthropic``."""
    mcp_reconcile: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """``WRITE=CHECK`` pairs (``--mcp-reconcile``): the MCP tool that says whether a
    call of a write took effect (see :mod:`orchestra.mcp`)."""
    research: bool = False
    """Whether ``orchestra run``'s agent has a research tool (``--research``): each
    call starts a child with the same tools and its own limits (``child_*``)."""
    child_model: str | None = None
    """The research children's model (``--child-model``); None: the root's."""
    faults: bool = True
    """Whether the embedded scripted server plays the scenario's fault modifiers."""

    def model_settings(self) -> ModelSettings:
        """:attr:`settings` as the agents take them."""
        from .._settings import ModelSettings

        return ModelSettings(**self.settings)

    def money(self) -> Money:
        """Prices and the margin floor (the demo's default prices are the scripted
        provider's own, so they are not said to be assumed)."""
        return Money(
            price_in=self.price_in,
            price_out=self.price_out,
            price_cached=self.price_cached,
            margin_ratio=self.margin_ratio,
            margin_tokens=self.margin_tokens,
        )

    def metadata(self) -> dict[str, str]:
        """The recipe as run metadata (without :attr:`faults`: never saved)."""
        saved = attrs.asdict(self)
        del saved["faults"]
        for key, default in (("settings", {}), ("wire", "chat"), ("mcp_reconcile", ())):
            if saved[key] == default:  # saved only when set: older versions resume the run
                del saved[key]
        return {_KEY: json.dumps(saved, sort_keys=True)}

    @classmethod
    def of(cls, state: RunState) -> Recipe:
        """The recipe saved with a run.

        Its demo server plays no faults (``faults=False``).

        Raises:
            StateError: the run was not started by the CLI.
        """
        raw = state.metadata.get(_KEY)
        if raw is None:
            raise StateError(
                f"run {state.run_id} was not started by the orchestra CLI; resume it from the "
                "code that started it (Runner.resume)"
            )
        saved = json.loads(raw)
        unknown = sorted(set(saved) - {f.name for f in attrs.fields(cls)})
        if unknown:
            raise StateError(
                f"run {state.run_id} was started by a newer orchestra CLI (its recipe has "
                f"{', '.join(unknown)}); resume it with that version"
            )
        return cls(**saved, faults=False)

    def policy(self) -> ToolPolicy:
        from .._agent import ToolPolicy, detailed_errors, generic_errors

        wording = generic_errors if self.errors == "generic" else detailed_errors
        return ToolPolicy(dedupe=self.dedupe, error_text=wording, fatal_errors=self.fatal_errors)

    def agent(self, limits: Limits, mcp_tools: tuple[Tool, ...] = ()) -> Agent:
        """The root agent (``limits`` are its defaults for a new run), with
        ``mcp_tools`` in place of catalog tools of the same name."""
        agent = self._agent(limits)
        if not mcp_tools:
            return agent
        offered = {tool.name: tool for tool in mcp_tools}
        kept = tuple(offered.pop(t.name, t) for t in agent.tools)
        return attrs.evolve(agent, tools=(*kept, *offered.values()))

    @asynccontextmanager
    async def mcp_tools(self) -> AsyncIterator[tuple[Tool, ...]]:
        """The tools of this recipe's MCP servers, connected for the block."""
        if not self.mcp:
            yield ()
            return
        try:
            from ..mcp import open_tools, parse_server
        except ModuleNotFoundError as exc:
            raise ConfigError(str(exc)) from None
        checks = dict(_pair(p) for p in self.mcp_reconcile)
        servers = (attrs.evolve(parse_server(s), reconcile=checks) for s in self.mcp)
        async with open_tools(*servers) as tools:
            yield tools

    def _agent(self, limits: Limits) -> Agent:
        from .._agent import Agent
        from .._catalog import catalog
        from .demo import demo_agent

        if self.scenario is not None:
            child = Limits(max_turns=self.child_turns, max_budget_usd=self.child_budget)
            return demo_agent(
                self.scenario,
                Path(self.directory),
                limits=limits,
                child_limits=child,
                policy=self.policy(),
                settings=self.model_settings(),
                # the Messages API has no response_format: the answer comes by a tool
                output_via="tool" if self.wire == "anthropic" else "response_format",
            )
        assert self.model is not None
        tools = catalog(self.directory)
        if self.tools is not None:
            tools = tuple(t for t in tools if t.name in self.tools)
        root = Agent(
            name="assistant",
            model=self.model,
            instructions=self.instructions,
            tools=tools,
            limits=limits,
            policy=self.policy(),
            max_tokens=self.max_tokens,
            look_first=self.look_first,
            budget_note=self.budget_note,
            settings=self.model_settings(),
        )
        return self._with_research(root) if self.research else root

    def _with_research(self, root: Agent) -> Agent:
        """``root`` with a ``research`` tool: a child run of the same tools and its
        own limits (carved from the root's) per call."""
        child = Limits(max_turns=self.child_turns, max_budget_usd=self.child_budget)
        researcher = attrs.evolve(
            root,
            name="researcher",
            model=self.child_model or root.model,
            instructions=f"{self.instructions}\n\n{RESEARCHER_NOTE}".strip(),
            limits=child,
        )
        tool = researcher.as_tool(name="research", description=RESEARCH_TOOL)
        instructions = f"{self.instructions}\n\n{RESEARCH_NOTE}".strip()
        return attrs.evolve(root, tools=(*root.tools, tool), instructions=instructions)

    def model_calls(self) -> ModelCalls:
        """How runs made from this recipe call their model: the one value the
        command line and the workers both build a runner's provider, prices,
        retries and margin from."""
        from .._model.retry import RetryPolicy
        from .calls import ModelCalls, ProviderOptions

        if self.scenario is not None:  # the embedded scripted server, wherever it runs
            options = ProviderOptions(
                timeout=DEMO_TIMEOUT_S,
                provider_name=self.provider_name or SCRIPTED_PROVIDER,
                wire=self.wire,
            )
        else:
            options = ProviderOptions(
                base_url=self.base_url,
                timeout=self.request_timeout,
                recover_tool_calls=self.recover_tool_calls,
                provider_name=self.provider_name,
                wire=self.wire,
            )
        return ModelCalls(
            provider=options,
            prices=self.money().prices(assumed_is_known=self.scenario is not None),
            retry=RetryPolicy(wait_for_server_s=self.wait_for_server_s),
            margin=self.money().margin(),
        )

    @asynccontextmanager
    async def provider(
        self, api_key: str = "", chunk_s: float = 0.0
    ) -> AsyncIterator[HTTPProvider]:
        """A provider for this recipe (the embedded scripted server for a demo,
        started for the block, playing the scenario's faults unless :attr:`faults`
        is off, waiting ``chunk_s`` seconds before each chunk of a streamed reply),
        built by :meth:`ProviderOptions.build`."""
        options = self.model_calls().provider
        async with contextlib.AsyncExitStack() as stack:
            url = None
            if options.base_url is None:
                from .._scripted.server import scripted_server

                server = scripted_server(faults=self.faults, chunk_s=chunk_s)
                url = await stack.enter_async_context(server)
            provider = options.build(scripted_url=url, api_key=api_key)
            try:
                yield provider
            finally:
                await provider.aclose()


def _pair(text: str) -> tuple[str, str]:
    """``WRITE=CHECK`` as (write, check).

    Raises:
        ConfigError: not two tool names joined by ``=``.
    """
    write, equals, check = text.partition("=")
    if not (equals and write.strip() and check.strip()):
        raise ConfigError(f"--mcp-reconcile takes WRITE=CHECK (two tool names), got {text!r}")
    return write.strip(), check.strip()
