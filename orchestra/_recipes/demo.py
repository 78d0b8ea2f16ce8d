"""The agents behind ``orchestra demo``: one per scripted scenario.

The root agent's model names the scenario; research scenarios give it a
``research`` tool backed by a ``researcher`` child agent (a chain of three
for ``deep``). Everything runs against the scripted provider.

A scenario may carry fault modifiers, ``plan+429x3`` (see
:mod:`orchestra._scripted.faults`): the root agent's model is the whole name,
so the scripted provider plays the faults on the root's requests; children
ask for plain ``researcher``.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from .._agent import Agent, ToolPolicy
from .._exceptions import ConfigError
from .._scripted.tools import demo_tools
from .._settings import ModelSettings
from .._state import Limits
from .._tools import Tool

__all__ = [
    "EXTRACT_SCENARIOS",
    "RESEARCH_SCENARIOS",
    "SCENARIOS",
    "Incident",
    "demo_agent",
    "parse_scenario",
]

SIMPLE_SCENARIOS = (
    "plan",
    "reasoning",
    "runaway",
    "stuck",
    "recover",
    "permanent",
    "repeat",
    "destructive",
    "slow",
)
RESEARCH_SCENARIOS = ("research", "research_runaway", "deep", "slow_tree")
EXTRACT_SCENARIOS = ("extract", "extract_invalid_once", "extract_never_valid")
SCENARIOS = SIMPLE_SCENARIOS + RESEARCH_SCENARIOS + EXTRACT_SCENARIOS

INSTRUCTIONS = (
    "You are an operations assistant. Use the tools to inspect the working directory "
    "and answer the user's question in one sentence."
)
RESEARCH_INSTRUCTIONS = "You are a researcher. Answer the question using the tools."
DEEP_LEVELS = 3
FAN_OUT_MAX_TOKENS = 8192
"""Room for up to 100 tool calls in the one reply that starts slow_tree's children."""

TASKS = {
    "plan": "Why did the nightly job fail?",
    "extract": "Which worker timed out, after how many ms, and which log line says so?",
    "slow": "Search the archive for timeouts.",
    "destructive": "The disk is full; free some space.",
    "slow_tree": "Scan the archives, children=3.",
}
DEFAULT_TASK = "Look into the logs and tell me what went wrong."


def _research_tool(
    directory: Path, child_limits: Limits, policy: ToolPolicy, depth: int, settings: ModelSettings
) -> Tool:
    tools = demo_tools(directory)
    if depth > 1:
        tools = (*tools, _research_tool(directory, child_limits, policy, depth - 1, settings))
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions=RESEARCH_INSTRUCTIONS,
        tools=tools,
        limits=child_limits,
        policy=policy,
        settings=settings,
    )
    return researcher.as_tool(name="research", description="Research a question with a sub-agent.")


def parse_scenario(name: str) -> tuple[str, tuple[str, ...]]:
    """``name``'s base scenario and its fault modifiers: ``("plan", ("429x3",))``.

    Raises:
        ConfigError: the base is not one of :data:`SCENARIOS`, or a modifier is
            malformed or unknown (the message names the known ones).
    """
    from .._scripted.faults import FaultSpec
    from .._scripted.scenarios import ScriptError

    try:
        spec = FaultSpec.parse(name)
    except ScriptError as exc:
        raise ConfigError(exc.message) from None
    if spec.base not in SCENARIOS:
        choices = ", ".join(SCENARIOS)
        raise ConfigError(f"unknown scenario {spec.base!r}; choose one of {choices}")
    return spec.base, tuple(str(m) for m in spec.modifiers)


DEFAULT_LIMITS = Limits(max_turns=20)
DEFAULT_CHILD_LIMITS = Limits(max_turns=8, max_budget_usd=0.05)
DEFAULT_POLICY = ToolPolicy()
_DEFAULT_SETTINGS = ModelSettings()


def demo_agent(
    scenario: str,
    directory: Path,
    *,
    limits: Limits = DEFAULT_LIMITS,
    child_limits: Limits = DEFAULT_CHILD_LIMITS,
    policy: ToolPolicy = DEFAULT_POLICY,
    settings: ModelSettings = _DEFAULT_SETTINGS,
    output_via: str = "response_format",
) -> Agent:
    """The root agent for ``scenario`` (with any modifiers) over the sandbox ``directory``
    (``settings``: its agents', the children's included; ``output_via``: how an
    ``extract`` scenario's output type reaches the model).

    Raises:
        ConfigError: ``scenario`` is not a scenario with valid modifiers.
    """
    base, _ = parse_scenario(scenario)
    tools = demo_tools(directory)
    if base in RESEARCH_SCENARIOS:
        depth = DEEP_LEVELS if base == "deep" else 1
        tools = (*tools, _research_tool(directory, child_limits, policy, depth, settings))
    return Agent(
        name="assistant",
        model=scenario,
        instructions=INSTRUCTIONS,
        tools=tools,
        limits=limits,
        policy=policy,
        max_tokens=FAN_OUT_MAX_TOKENS if base == "slow_tree" else 1024,
        output_type=Incident if base in EXTRACT_SCENARIOS else None,
        output_via=output_via,
        settings=settings,
    )


@attrs.frozen(kw_only=True)
class Incident:
    """What went wrong, as the ``extract`` scenarios answer it (their output type)."""

    worker: int
    timeout_ms: int
    evidence: str


def demo_task(scenario: str, children: int | None = None) -> str:
    """The user's message for ``scenario`` (modifiers do not change it)."""
    base = scenario.partition("@")[0].split("+")[0]
    if base == "slow_tree" and children is not None:
        return f"Scan the archives, children={children}."
    return TASKS.get(base.split("_")[0] if base in EXTRACT_SCENARIOS else base, DEFAULT_TASK)
