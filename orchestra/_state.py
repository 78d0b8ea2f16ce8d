"""Run state: plain, serialisable data.

A run is entirely described by a :class:`RunState`. It holds no live objects
(no sockets, no scopes), so it can be saved after any step and loaded in
another process to continue from exactly there.

Schema versions (one line each; a stored fixture per version lives in tests):

* 1 — first version.
"""

from __future__ import annotations

import enum
import json
import time
from typing import Any

import attrs

from ._exceptions import ConfigError
from ._money import from_usd, to_usd
from ._settings import ModelSettings

__all__ = [
    "Approval",
    "Interruption",
    "InterruptionKind",
    "LimitRaise",
    "Limits",
    "RunState",
    "Status",
    "Usage",
]

SCHEMA_VERSION = 1


class Status(enum.StrEnum):
    """Where a run is. Every run ends in exactly one of the non-``running`` values."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    INTERRUPTED = "interrupted"

    @property
    def resumable(self) -> bool:
        """Whether :meth:`Runner.resume` may continue a run in this status.

        ``interrupted`` runs wait for something (an approval, a restart after a
        cancel); ``running`` is how a crashed process leaves a run. Limit exits
        resume only after the caller raises that limit.
        """
        return self in _RESUMABLE

    @property
    def terminal(self) -> bool:
        """Whether the run has stopped (any status but ``running``)."""
        return self is not Status.RUNNING


_RESUMABLE = frozenset(
    {
        Status.RUNNING,
        Status.INTERRUPTED,
        Status.MAX_TURNS_EXCEEDED,
        Status.BUDGET_EXCEEDED,
        Status.DEADLINE_EXCEEDED,
    }
)


class InterruptionKind(enum.StrEnum):
    """Why an ``interrupted`` run is waiting."""

    APPROVAL = "approval"
    CANCELLED = "cancelled"
    UNKNOWN_OUTCOME = "unknown_outcome"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    """The model endpoint kept failing with transient errors; resume later."""
    NO_PROGRESS = "no_progress"
    """The same tool call kept getting the same result (``Agent.no_progress_after``)."""
    STOP_CONDITION = "stop_condition"
    """A predicate of ``Agent.stop_when`` asked the run to stop."""
    BUDGET_REQUEST = "budget_request"
    """A limit marked ``on_limit="ask"`` was reached: the run asks for more
    (granted with :meth:`Runner.grant`, refused with ``reject``)."""

    @property
    def waits_for_human(self) -> bool:
        """Whether a person must decide before the run can go on."""
        return self in _DECISIONS


_DECISIONS = frozenset(
    {InterruptionKind.APPROVAL, InterruptionKind.UNKNOWN_OUTCOME, InterruptionKind.BUDGET_REQUEST}
)


@attrs.frozen(kw_only=True)
class Interruption:
    """What an ``interrupted`` run waits for.

    For ``approval`` and ``unknown_outcome``: the call (``call_id``, ``tool``,
    ``arguments``) and the run that holds it (``run_id``; a descendant's id when
    the approval surfaced from a child run). For ``budget_request``: the
    request's id (``call_id``), what the run would need to finish
    (``estimate_usd``, from its calls so far) and its answer so far
    (``partial``: what its tools returned; kept out of its transcript).
    """

    kind: InterruptionKind
    reason: str = ""
    run_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    estimate_usd: float | None = None
    partial: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As plain JSON data (``kind`` as its string; a budget request's own
        fields only when set)."""
        data: dict[str, Any] = {
            "kind": self.kind.value,
            "reason": self.reason,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
        }
        if self.estimate_usd is not None:
            data["estimate_usd"] = self.estimate_usd
        if self.partial is not None:
            data["partial"] = self.partial
        return data


@attrs.frozen(kw_only=True)
class Usage:
    """Counters that add up: model calls, tokens, cost, tool and child runs.

    ``cached_input_tokens`` are the part of ``prompt_tokens`` the provider read
    from its cache (billed at the cached rate), ``cache_write_tokens`` the part
    it wrote to it (billed at the cache-write rate); ``reasoning_tokens`` the part
    of ``completion_tokens`` the model spent thinking (billed as output, never
    seen in the text).
    """

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_pico: int = 0
    tool_runs: int = 0
    child_runs: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        """The fields as a dict (what ``attrs.asdict`` gives, built without its walk;
        ``cache_write_tokens`` only when there are any, so older versions read it)."""
        written = {"cache_write_tokens": self.cache_write_tokens} if self.cache_write_tokens else {}
        return {
            "model_calls": self.model_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_pico": self.cost_pico,
            "tool_runs": self.tool_runs,
            "child_runs": self.child_runs,
            "cached_input_tokens": self.cached_input_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            **written,
        }

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            model_calls=self.model_calls + other.model_calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_pico=self.cost_pico + other.cost_pico,
            tool_runs=self.tool_runs + other.tool_runs,
            child_runs=self.child_runs + other.child_runs,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(**{f: getattr(self, f) - getattr(other, f) for f in _USAGE_FIELDS})

    @property
    def cost_usd(self) -> float:
        """Cost in dollars."""
        return to_usd(self.cost_pico)

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


_USAGE_FIELDS = tuple(a.name for a in attrs.fields(Usage))


@attrs.frozen(kw_only=True)
class Limits:
    """What a run may use. ``None`` means unbounded (within its ancestors' limits).

    ``max_turns`` counts the run's *own* model calls (each child has its own
    turn limit, from its agent or tool). ``max_budget_usd`` bounds the run's
    *tree* spend (its own calls and every descendant's); ``max_tokens_total``
    bounds its tree's prompt plus completion tokens the same way (a second
    budget that needs no prices). Both budgets are enforced before each call
    and carved down the tree (see :class:`~orchestra.Carving`).
    ``timeout_s`` is relative to the run's start and is turned into an absolute
    ``deadline`` (wall-clock seconds since the epoch) when the run starts, so it
    survives a restart. ``wind_down_tokens`` keeps that many output tokens (and
    what their call costs) for a final answer: when the next regular call could
    not be paid without them, or one turn is left, or the deadline is one call
    away, the run makes one last call with no tools for its best answer from
    what it has, and stops with its limit's status and that answer, marked
    partial (see :mod:`orchestra._core.wind_down`; None: no wind-down).
    """

    max_turns: int | None = None
    max_budget_usd: float | None = None
    timeout_s: float | None = None
    deadline: float | None = None
    max_tokens_total: int | None = None
    wind_down_tokens: int | None = None
    max_depth: int | None = None
    """Levels of runs below this one (0: it starts no children); a child gets one
    level fewer (or what it asks, if less)."""
    max_children: int | None = None
    """Children this run may start (each of its replies' calls over it is told so);
    a child gets the same bound unless it asks for less."""
    max_descendants: int | None = None
    """Runs this run's whole tree may hold below it (checked on every ancestor)."""
    max_concurrent_children: int | None = None
    """Children of this run running at once (the others wait; on workers the
    parent's call parks until the running ones have ended)."""
    on_limit: str | None = None
    """What reaching the turn limit or a budget does: ``"stop"`` (the run ends
    ``max_turns_exceeded``/``budget_exceeded``) or ``"ask"`` (it pauses,
    ``interrupted`` with a ``budget_request``: see :mod:`orchestra._core.top_up`).
    None: as the parent run (a root: stop)."""

    def __attrs_post_init__(self) -> None:
        for name in _LIMIT_NAMES:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"Limits.{name} must be >= 0, got {value}")
        if self.max_concurrent_children == 0:
            raise ConfigError("Limits.max_concurrent_children must be >= 1 (None: unbounded)")
        if self.on_limit not in (None, "stop", "ask"):
            raise ConfigError(f"Limits.on_limit must be 'stop' or 'ask', got {self.on_limit!r}")

    @property
    def asks(self) -> bool:
        """Whether reaching a limit asks for more instead of stopping."""
        return self.on_limit == "ask"

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (what ``attrs.asdict`` gives, built without its walk)."""
        return {
            "max_turns": self.max_turns,
            "max_budget_usd": self.max_budget_usd,
            "timeout_s": self.timeout_s,
            "deadline": self.deadline,
            "max_tokens_total": self.max_tokens_total,
            "wind_down_tokens": self.wind_down_tokens,
            "max_depth": self.max_depth,
            "max_children": self.max_children,
            "max_descendants": self.max_descendants,
            "max_concurrent_children": self.max_concurrent_children,
            "on_limit": self.on_limit,
        }

    def saved(self) -> dict[str, Any]:
        """The fields as saved: those on the tree's shape only when set (a state that
        sets none reads in a version that does not know them)."""
        data = self.to_dict()
        for name in _SAVED_WHEN_SET:
            if data[name] is None:
                del data[name]
        return data

    def shape(self) -> dict[str, int]:
        """The limits on the tree's shape that are set (for display)."""
        given = {name: getattr(self, name) for name in SHAPE_LIMITS}
        return {name: value for name, value in given.items() if value is not None}

    @property
    def budget_pico(self) -> int | None:
        """The budget in pico-dollars, or ``None``."""
        return None if self.max_budget_usd is None else from_usd(self.max_budget_usd)

    def anchored(self, now: float) -> Limits:
        """These limits with ``timeout_s`` turned into an absolute deadline."""
        if self.timeout_s is None:
            return self
        deadline = now + self.timeout_s
        if self.deadline is not None:
            deadline = min(deadline, self.deadline)
        return attrs.evolve(self, timeout_s=None, deadline=deadline)


_LIMIT_NAMES = (
    "max_turns",
    "max_budget_usd",
    "timeout_s",
    "max_tokens_total",
    "wind_down_tokens",
    "max_depth",
    "max_children",
    "max_descendants",
    "max_concurrent_children",
)
SHAPE_LIMITS = ("max_depth", "max_children", "max_descendants", "max_concurrent_children")
"""The limits on a tree's shape: saved only when set, so a state without them
reads in a version that does not know them."""
_SAVED_WHEN_SET = (*SHAPE_LIMITS, "on_limit")


@attrs.frozen
class WindDown:
    """A run at its end by a limit: the status and reason it will stop with (kept in
    ``RunState.winding_down`` while its final call is still to make)."""

    status: Status
    reason: str


@attrs.frozen(kw_only=True)
class Approval:
    """A human's yes to one call, bound to its exact arguments."""

    call_id: str
    arguments: dict[str, Any]


@attrs.frozen(kw_only=True)
class LimitRaise:
    """An explicit raise of a limit by the caller, kept for the record."""

    at: float
    before: Limits
    after: Limits
    note: str = ""


def _now() -> float:
    return time.time()


@attrs.define(kw_only=True)
class RunState:
    """Everything about one run, as plain data.

    ``messages`` are OpenAI chat messages (``tool_calls`` on assistant messages,
    ``tool_call_id`` on tool messages). ``results`` holds tool results of the
    current assistant message that are done but not yet in the transcript:
    results enter ``messages`` together, in the order of the calls.
    ``started`` lists call ids whose tool began running (exactly-once on resume).
    """

    run_id: str
    root_id: str
    agent: str
    model: str
    parent_id: str | None = None
    parent_call_id: str | None = None
    schema_version: int = SCHEMA_VERSION
    messages: list[dict[str, Any]] = attrs.Factory(list)
    status: Status = Status.RUNNING
    reason: str = ""
    error: str | None = None
    interruption: Interruption | None = None
    limits: Limits = Limits()
    limit_raises: list[LimitRaise] = attrs.Factory(list)
    own: Usage = Usage()
    tree: Usage = Usage()
    approvals: list[Approval] = attrs.Factory(list)
    rejections: dict[str, str] = attrs.Factory(dict)
    results: dict[str, str] = attrs.Factory(dict)
    started: list[str] = attrs.Factory(list)
    children: dict[str, str] = attrs.Factory(dict)
    """Child run id by the call id that spawned it."""
    awaiting: list[str] = attrs.Factory(list)
    """Child runs executing elsewhere (on workers) that a parked call of this
    run waits for. Once one has ended, its end is the call's answer as it
    stands: an interrupted one is resumed only when this run is resumed
    (which empties the list), never by the wake that its end caused."""
    elapsed_s: float = 0.0
    created_at: float = attrs.Factory(_now)
    updated_at: float = attrs.Factory(_now)
    trace_context: dict[str, str] = attrs.Factory(dict)
    """OpenTelemetry context of the run's span, so a resumed run continues its trace."""
    metadata: dict[str, str] = attrs.Factory(dict)
    """The application's own notes (e.g. how to rebuild the agent in another process)."""
    answer_partial: bool = False
    """The run stopped at a limit with a final answer from what it had (a wind-down)."""
    output: Any = None
    """The answer as a JSON value, when the agent declares an output type (see
    :mod:`orchestra._output`); None otherwise."""
    continues: str | None = None
    """The run this one continues with a new user message (see
    :mod:`orchestra._conversation`); None for a conversation's first run."""
    conversation_id: str | None = None
    """The first run of the conversation this run continues (None: its own)."""
    winding_down: WindDown | None = None
    """The wind-down under way (its final call not made yet), so that a resume
    makes the same final call (see :mod:`orchestra._core.wind_down`); saved
    only when set."""
    settings: ModelSettings | None = None
    """How this run asks its model (its agent's settings, under the ones given for
    the run: see :mod:`orchestra._settings`), kept so that a resume asks the same
    way; None: the server's defaults. Saved only when set."""

    @property
    def conversation(self) -> str:
        """The conversation's id: its first run's."""
        return self.conversation_id or self.run_id

    @property
    def turns(self) -> int:
        """Model calls this run has made (its own, not its children's)."""
        return self.own.model_calls

    @property
    def answer(self) -> str | None:
        """The final prose answer, if the run completed with one or wound down to
        one at a limit (then :attr:`answer_partial`)."""
        done = self.status is Status.COMPLETED or self.answer_partial
        if done and self.output is not None:  # a structured answer: its JSON
            return json.dumps(self.output, ensure_ascii=False, separators=(",", ":"))
        if not done or not self.messages:
            return None
        last = self.messages[-1]
        return last.get("content") if last.get("role") == "assistant" else None
