"""Agents: a model, instructions, tools and default limits, as one value."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic

import attrs

from ._carving import Carving
from ._deps import DepsT, RunContext
from ._exceptions import ConfigError, PermanentToolError
from ._output import OUTPUT_TOOL, OutputSpec, OutputT, output_spec
from ._settings import ModelSettings
from ._state import Limits, RunState
from ._tools import DEFAULT_RESULT_BYTES, MIN_RESULT_BYTES, Tool, ToolContext, check_timeout
from ._top_ups import TopUps

__all__ = ["Agent", "ToolPolicy", "detailed_errors", "generic_errors"]

ErrorText = Callable[[str, BaseException], str]
"""How a tool failure is worded for the model: ``(tool_name, exception) -> text``."""


def detailed_errors(tool_name: str, exc: BaseException) -> str:
    """The default wording: ``Error: <message>`` (the model can act on it)."""
    return f"Error: {exc}"


def generic_errors(tool_name: str, exc: BaseException) -> str:
    """A wording that hides the cause: the model can only give up or guess."""
    return "Error: something failed."


DEFAULT_REJECTION = "The user declined this call; nothing was done."


def _result_limit(_policy: object, _attribute: object, value: int) -> None:
    """A result bound must leave room for a useful result and its truncation note."""
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_RESULT_BYTES:
        raise ConfigError(
            f"max_result_bytes must be an integer >= {MIN_RESULT_BYTES}, got {value!r}"
        )


def _in_words(_policy: object, _attribute: object, value: str) -> None:
    """A rejected call's result must say something: silence reads as success."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"rejection_text must be a non-empty sentence, got {value!r}")


def _timeout(_policy: object, _attribute: object, value: float | None) -> None:
    check_timeout("ToolPolicy.tool_timeout_s", value)


@attrs.frozen(kw_only=True)
class ToolPolicy:
    """What the loop does around tool calls.

    Attributes:
        error_text: wording of a failed tool's result.
        fatal_errors: any tool error ends the run ``failed``.
        dedupe: answer a read-only call identical to an earlier one from the transcript.
        permanent_errors: exception types the model cannot fix; the run stops ``failed``.
        rejection_text: the tool result of a rejected call given no reason.
        max_result_bytes: the most UTF-8 bytes of a tool's result the model sees; a
            longer result is cut, with a note giving its full size (at least 1024).
        tool_timeout_s: the time limit of a call to a tool that sets none
            (``None``: no limit). A read that runs out is answered "timed out";
            a write that runs out is in doubt: the run stops ``interrupted``
            (``unknown_outcome``) for a human. Agent tools (:meth:`Agent.as_tool`)
            have no limit of their own but their child's limits.
    """

    error_text: ErrorText = detailed_errors
    fatal_errors: bool = False
    dedupe: bool = False
    permanent_errors: tuple[type[BaseException], ...] = (PermanentToolError, PermissionError)
    rejection_text: str = attrs.field(default=DEFAULT_REJECTION, validator=_in_words)
    max_result_bytes: int = attrs.field(default=DEFAULT_RESULT_BYTES, validator=_result_limit)
    tool_timeout_s: float | None = attrs.field(default=None, validator=_timeout)


def _tool_tuple(tools: Iterable[Tool]) -> tuple[Tool, ...]:
    return tuple(tools)


@attrs.frozen(kw_only=True)
class Agent(Generic[DepsT, OutputT]):
    """A model with instructions, tools and default limits.

    Generic in its dependencies' type and its answer's: an
    ``Agent[Deps, Report]`` (inferred from ``deps_type`` and ``output_type``)
    gives runs whose ``RunResult.output`` is a ``Report``, and takes
    ``deps: Deps`` (see :mod:`orchestra._deps`).

    ``max_tokens`` is the most a reply may use; the budget gate lowers it
    further when the remaining budget cannot pay for it. ``stop_when`` holds
    predicates called with the run's state after each step (a non-empty string
    stops the run, see :mod:`orchestra._core.stops`); ``no_progress_after`` stops a
    run whose last that-many replies each made one call, the same, with the
    same result (None: never). ``look_first`` makes the model call a tool before
    it may answer: each request until the run's first tool call says
    ``tool_choice: "required"`` (servers such as llama.cpp then decode the reply
    under a grammar that admits only a call), later ones leave the choice to
    the model, which can then answer (a small model that would answer from
    nothing looks first; one told to call tools always would never stop).
    """

    name: str
    model: str
    instructions: str | Callable[[RunContext[DepsT]], str] = ""
    """The system message of its runs; or a function of the run's context
    (:class:`~orchestra.RunContext`: its dependencies, limits, depth, ...),
    called once as each run starts, whose text is saved with the run."""
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tool_tuple)
    limits: Limits = Limits()
    policy: ToolPolicy = ToolPolicy()
    max_tokens: int = 1024
    settings: ModelSettings = ModelSettings()
    """How the model samples each reply of this agent's runs (temperature, seed,
    stop, ...: see :class:`~orchestra.ModelSettings`); a run may be given its own,
    which win field by field. ``settings.max_tokens``, when set, replaces
    :attr:`max_tokens`."""
    stop_when: tuple[Callable[[RunState], str | None], ...] = attrs.field(
        default=(), converter=tuple
    )
    no_progress_after: int | None = 3
    look_first: bool = False
    carving: Carving = Carving()
    """How the children one reply starts share this agent's runs' budget
    (see :class:`~orchestra.Carving`: equal shares, the run's answer kept)."""
    top_ups: TopUps | None = None
    """How this agent's runs answer their children's requests for more (limits
    with ``on_limit="ask"``) before a person is asked (None: a person is)."""
    budget_note: bool = False
    """Each request ends with a system note of what the run has left (turns,
    budget, tokens, time), for the model to plan by; in the request only."""
    deps_type: type[DepsT] | None = None
    """The type of the dependencies its runs must be given (None: any, or none);
    a run without them, or with others, is refused in one line."""
    output_type: type[OutputT] | Mapping[str, Any] | None = None
    """The answer's shape: a JSON schema (a dict), an attrs class, a dataclass, a
    TypedDict or a pydantic model (see :mod:`orchestra._output`); None: prose.
    A class makes this an ``Agent[..., that class]``, whose runs'
    ``RunResult.output`` is an instance of it."""
    output_via: str = "response_format"
    """How the shape reaches the model: ``"response_format"`` (json_schema) or
    ``"tool"`` (a final-answer tool, for endpoints without response_format)."""
    output_retries: int = 2
    """Answers that do not fit sent back to the model to fix, before the run fails."""
    output: OutputSpec | None = attrs.field(default=None, eq=False, repr=False)
    """The spec derived from ``output_type`` (a value given here is replaced by it)."""

    def __attrs_post_init__(self) -> None:
        if self.no_progress_after is not None and self.no_progress_after < 2:
            raise ConfigError(f"agent {self.name}: no_progress_after must be >= 2 or None")
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"agent {self.name}: duplicate tool names in {names}")
        if self.max_tokens < 1:
            raise ConfigError(f"agent {self.name}: max_tokens must be >= 1")
        if self.output_retries < 0:
            raise ConfigError(f"agent {self.name}: output_retries must be >= 0")
        spec = None if self.output_type is None else output_spec(self.output_type, self.output_via)
        object.__setattr__(self, "output", spec)
        if spec is not None and spec.tool is not None and OUTPUT_TOOL in names:
            raise ConfigError(f"agent {self.name}: a tool is named {OUTPUT_TOOL}")

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if the agent has it (its output tool included)."""
        return next((t for t in self._offered() if t.name == name), None)

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools as declared in a request (its output tool last)."""
        return [t.spec() for t in self._offered()]

    def _offered(self) -> tuple[Tool, ...]:
        extra = None if self.output is None else self.output.tool
        return self.tools if extra is None else (*self.tools, extra)

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        limits: Limits | None = None,
    ) -> Tool:
        """This agent as a tool: each call runs a child run on the question.

        The child gets its own transcript and ``limits`` (default: the agent's),
        carved from what the calling run has left; its answer, or a sentence
        saying why it stopped, is the tool result.
        """
        child_limits = limits or self.limits
        says = f" It answers with JSON fitting: {self.output.describe()}" if self.output else ""

        async def run_agent(question: str, ctx: ToolContext) -> str:
            return await ctx.run_child(self, question, limits=child_limits)

        return Tool(
            name=name or self.name,
            description=(description or f"Ask the {self.name} agent a question.") + says,
            parameters={
                "type": "object",
                "properties": {"question": {"type": "string", "description": "What to find out."}},
                "required": ["question"],
                "additionalProperties": False,
            },
            function=run_agent,
            read_only=True,
            takes_context=True,
            timeout_s=float("inf"),  # the child's own limits bound it
            agent=self,
        )

    def instructions_for(self, context: RunContext[DepsT]) -> str:
        """The system message of a run starting in ``context`` ('' for none).

        Raises:
            ConfigError: the instructions' function failed or returned no text.
        """
        if isinstance(self.instructions, str):
            return self.instructions
        try:
            text = self.instructions(context)
        except Exception as exc:
            raise ConfigError(f"agent {self.name}: its instructions failed: {exc}") from exc
        if not isinstance(text, str):
            raise ConfigError(
                f"agent {self.name}: its instructions returned {type(text).__name__}, not text"
            )
        return text

    def find(self, name: str) -> Agent | None:
        """This agent or one reachable through its agent tools, by name."""
        if self.name == name:
            return self
        for tool in self.tools:
            found = tool.agent.find(name) if isinstance(tool.agent, Agent) else None
            if found is not None:
                return found
        return None
