"""Stop conditions: checked after every step of a run.

Two kinds stop a run before its limits do, both as ``interrupted`` with a
reason (resumable: a person may look, change something and go on):

* **No progress** (``InterruptionKind.NO_PROGRESS``): the last
  ``Agent.no_progress_after`` replies that called tools (default 3) each
  called the same tool with the same arguments and got the same result (one
  reply making the same call several times counts once). A model stuck in such a loop
  would otherwise spend to its turn or budget cap.
* **User predicates** (``InterruptionKind.STOP_CONDITION``): each of
  ``Agent.stop_when`` is called with the run's state after each step; the
  first to return a non-empty string stops the run with that string as the
  reason. A predicate that raises fails the run, naming it.

Predicates are synchronous and must not block: they run on the trio thread.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from .._state import Interruption, InterruptionKind, RunState, Status
from .run import Exit, LiveRun

__all__ = ["StopCondition", "check_stops", "repeated_calls"]

StopCondition = Callable[[RunState], "str | None"]
"""Called after each step; a non-empty string stops the run with that reason."""


def check_stops(run: LiveRun) -> Exit | None:
    """The exit a stop condition asks for after this step, if any."""
    limit = run.agent.no_progress_after
    if limit is not None and (repeat := repeated_calls(run.state, limit)) is not None:
        reason = (
            f"no progress: {repeat} was called {limit} times in a row with the same "
            "arguments and got the same result"
        )
        return _interrupted(InterruptionKind.NO_PROGRESS, reason)
    for condition in run.agent.stop_when:
        exit_ = _ask(condition, run.state)
        if exit_ is not None:
            return exit_
    return None


def _ask(condition: StopCondition, state: RunState) -> Exit | None:
    name = getattr(condition, "__qualname__", repr(condition))
    try:
        said = condition(state)
    except Exception as exc:  # a user's predicate failing is the run's failure, as data
        return Exit(status=Status.FAILED, reason=f"stop condition {name} raised {exc!r}")
    if not said:
        return None
    return _interrupted(InterruptionKind.STOP_CONDITION, f"stop condition {name}: {said}")


def _interrupted(kind: InterruptionKind, reason: str) -> Exit:
    waiting = Interruption(kind=kind, reason=reason)
    return Exit(status=Status.INTERRUPTED, reason=reason, interruption=waiting)


def repeated_calls(state: RunState, times: int) -> str | None:
    """The tool name if the last ``times`` replies with answered calls each made one
    call, the same one, with the same result (the same call made several times
    in one reply counts once: a model writing it twice is not going round).

    Walks the transcript backwards and stops at the first different call, so
    a step costs what it looks at, not the length of the run.
    """
    results: dict[Any, Any] = {}
    first: tuple[str, str, str] | None = None
    count = 0
    for message in reversed(state.messages):
        if message.get("role") == "tool":
            results[message.get("tool_call_id")] = message.get("content")
            continue
        entries = _answered(message, results)
        if not entries:
            continue
        if len(entries) > 1 or (first is not None and first not in entries):
            return None
        first, count = next(iter(entries)), count + 1
        if count >= times:
            return first[0]
    return None


def _answered(message: dict[str, Any], results: dict[Any, Any]) -> set[tuple[str, str, str]]:
    """The distinct answered calls of ``message`` (name, arguments, result)."""
    calls = message.get("tool_calls") or ()
    return {
        _entry(call, results[call.get("id")])
        for call in calls
        if results.get(call.get("id")) is not None
    }


def _entry(call: dict[str, Any], result: Any) -> tuple[str, str, str]:
    fn = call.get("function") or {}
    return str(fn.get("name")), _canonical(fn.get("arguments")), str(result)


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        return _canonical_text(arguments)
    return str(arguments)


@functools.lru_cache(maxsize=1024)
def _canonical_text(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return str(arguments)
