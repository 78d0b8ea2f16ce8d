"""Tool dispatch: pending calls in, results (in words) out.

Every call the model makes gets exactly one tool result in the transcript:
the tool's output, or a sentence saying what the code decided instead
(malformed arguments, unknown tool, rejected, answered from an identical
earlier call, failed, timed out). Read-only calls run concurrently; writes
run one after another in the order the model gave them; results enter the
transcript together, in call order.

A call runs under its time limit (``Tool.timeout_s``, else the policy's
``tool_timeout_s``), a cancel scope of its own inside the run's. A read that
runs out is answered "timed out after N s" and the run goes on; a write that
runs out may or may not have taken effect, so it is treated like a write a
crash cut short: no result, the run stops ``interrupted``/``unknown_outcome``
until a human approves running it again or rejects it (an idempotent write
runs again on resume, with the same idempotency key).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

import attrs
import trio

from .._agent import Agent
from .._exceptions import ConfigError, ToolOutcomeUnknown
from .._output import OUTPUT_TAKEN, FinalOutput
from .._redact import redact
from .._state import Interruption, InterruptionKind, Limits, RunState, Status, Usage
from .._storable import valid_text
from .._tools import ChildAgent, Tool, ToolContext, ToolInputError, bound_result
from .answers import ANSWERED
from .reconcile import ask_world, settled_text
from .remote import remote
from .run import ChildPending, ChildWaiting, Exit, LiveRun

__all__ = [
    "MAX_CALLS_PER_REPLY",
    "dispatch",
    "flush_results",
    "idempotency_key",
    "may_park",
    "pending_calls",
]

MAX_CALLS_PER_REPLY = 128
"""Tool calls considered from one reply; the rest are answered with a refusal in words."""


@attrs.frozen(kw_only=True)
class Call:
    """A tool call that passed its checks and may run."""

    id: str
    tool: Tool
    arguments: dict[str, Any]


def _open_calls(state: RunState) -> tuple[list[dict[str, Any]], set[str]]:
    """Tool calls of the last assistant message, and the ids already answered."""
    answered: set[str] = set(state.results)
    for message in reversed(state.messages):
        if message.get("role") == "tool":
            answered.add(str(message.get("tool_call_id")))
            continue
        if message.get("role") == "assistant":
            return list(message.get("tool_calls") or []), answered
        break
    return [], answered


def pending_calls(state: RunState) -> list[dict[str, Any]]:
    """Calls of the last assistant message that have no result yet."""
    calls, answered = _open_calls(state)
    return [c for c in calls if c["id"] not in answered]


def may_park(run: LiveRun, call_id: str) -> bool:
    """Whether call ``call_id`` of ``run``'s last reply may *park* while a child
    it started executes elsewhere: its tool runs again from the top once the
    child has ended, so it must be a read or an idempotent write (a plain
    write would be in doubt on its second run)."""
    calls, _ = _open_calls(run.state)
    name = next((str(c["function"]["name"]) for c in calls if c["id"] == call_id), None)
    tool = None if name is None else run.agent.tool(name)
    return tool is not None and (tool.read_only or tool.idempotent)


def flush_results(run: LiveRun, *, save: bool = True) -> None:
    """Once every call of the last message has a result, append them in call order
    (and save, unless ``save`` is False: the caller saves next)."""
    state = run.state
    calls, _ = _open_calls(state)
    if not state.results or any(c["id"] not in state.results for c in calls):
        return
    for call in calls:
        if call["id"] in state.results:
            text = state.results.pop(call["id"])
            state.messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    state.results.clear()
    state.started.clear()  # only calls of the open message can be in doubt
    if save:
        run.checkpoint()


def record_result(run: LiveRun, call_id: str, text: str, *, save: bool = True) -> None:
    """Keep one call's result (saved at once unless ``save`` is False; it joins the
    transcript with its siblings).

    The last result of a reply is not saved here: the loop appends the batch
    to the transcript and saves it next, with no checkpoint in between that
    could lose it (a cancel saves the whole state, results included).
    """
    state = run.state
    state.results[call_id] = text
    if save and any(c["id"] not in state.results for c in _open_calls(state)[0]):
        run.checkpoint()


# -- deciding what each call gets ---------------------------------------------


def _canonical(name: str, arguments: dict[str, Any]) -> str:
    return name + json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def _earlier_results(run: LiveRun) -> dict[str, tuple[str, str]]:
    """Read-only calls answered in the transcript since its last write: key → (call
    id, result). A write may change what any read sees, so none before it is reused."""
    results = {
        m.get("tool_call_id"): m.get("content")
        for m in run.state.messages
        if m.get("role") == "tool"
    }
    cache: dict[str, tuple[str, str]] = {}
    for message in run.state.messages:
        for call in message.get("tool_calls") or ():
            tool, text = run.agent.tool(call["function"]["name"]), results.get(call["id"])
            if tool is not None and not tool.read_only:
                cache.clear()
            if tool is None or not tool.read_only or not isinstance(text, str):
                continue
            if text.startswith("Error:"):
                continue
            try:
                args = tool.parse_arguments(call["function"]["arguments"])
            except ToolInputError:
                continue
            cache.setdefault(_canonical(tool.name, args), (call["id"], text))
    return cache


def _check(run: LiveRun, call: dict[str, Any]) -> Call | str:
    """The call ready to run, or the result text that answers it instead."""
    fn = call.get("function") or {}
    name = str(fn.get("name"))
    tool = run.agent.tool(name)
    if tool is None:
        names = ", ".join(t.name for t in run.agent.tools) or "none"
        return f"Error: there is no tool named {name!r}. Available tools: {names}."
    try:
        arguments = tool.parse_arguments(str(fn.get("arguments") or ""))
    except ToolInputError as exc:
        return f"Error: invalid arguments for {name}: {exc}. Nothing was run."
    return Call(id=str(call["id"]), tool=tool, arguments=arguments)


def _deduped(cache: dict[str, tuple[str, str]], call: Call) -> str | None:
    hit = cache.get(_canonical(call.tool.name, call.arguments))
    if hit is None or not call.tool.read_only:
        return None
    return (
        f"{hit[1]}\n[Same call as {hit[0]}: this result was reused and the tool was not run again.]"
    )


def _approved(run: LiveRun, call: Call) -> bool:
    return any(a.call_id == call.id and a.arguments == call.arguments for a in run.state.approvals)


def gate(run: LiveRun, call: Call) -> str | Interruption | None:
    """What stands before a call: a rejection text, a wait for a human, or nothing.

    A write that started in an earlier process and left no result is *in doubt*
    (it may or may not have happened): it is not run again blindly unless the
    tool is idempotent or a human approves it again.
    """
    if call.id in run.state.rejections:
        reason = run.state.rejections[call.id]
        return f"Rejected by the user: {reason}" if reason else run.agent.policy.rejection_text
    if _approved(run, call):
        return None
    tool = call.tool
    if _doubtful(run, call):
        return _waiting(
            run,
            call,
            InterruptionKind.UNKNOWN_OUTCOME,
            f"{tool.name} started before the process stopped and its outcome is "
            "unknown; approve to run it again, or reject saying what happened",
        )
    if tool.needs_approval:
        return _waiting(run, call, InterruptionKind.APPROVAL, f"{tool.name} needs approval")
    return None


def _doubtful(run: LiveRun, call: Call) -> bool:
    """A write that started in an earlier process and left no result."""
    tool = call.tool
    return call.id in run.state.started and not (tool.read_only or tool.idempotent)


def _waiting(run: LiveRun, call: Call, kind: InterruptionKind, reason: str) -> Interruption:
    return Interruption(
        kind=kind,
        run_id=run.state.run_id,
        call_id=call.id,
        tool=call.tool.name,
        arguments=call.arguments,
        reason=reason,
    )


# -- running ------------------------------------------------------------------


async def dispatch(run: LiveRun, calls: list[dict[str, Any]]) -> None:
    """Give every pending call a result, or stop the run (approval, fatal error).

    Read-only calls that need nobody's approval run concurrently; the others
    then run one by one in the model's order, each after its gate; the first
    that must wait for a human stops the run there. A call that waits for a
    child executing elsewhere *parks* the run (``run.parked``): the calls
    after it wait with it, and the step ends with them pending.

    Cancellation: a checkpoint. Results recorded before a cancel are kept.
    """
    ready = _decide_first(run, calls)
    free = [c for c in ready if c.tool.read_only and gate(run, c) is None]
    if len(free) == 1:  # no nursery (a frame less under every leaf of a tree)
        await run_call(run, free[0])
    elif free:
        await _run_concurrently(run, free)
    for call in (c for c in ready if c not in free):
        if run.state.status is not Status.RUNNING or run.parked:
            return
        if not await _run_gated(run, call):
            return


def _decide_first(run: LiveRun, calls: list[dict[str, Any]]) -> list[Call]:
    """Answer in words every call the code decides alone (one save for all of
    them); the calls that may run, in the model's order."""
    cache = _earlier_results(run) if run.agent.policy.dedupe else {}
    ready: list[Call] = []
    decided = 0
    for index, raw in enumerate(calls):
        checked = _over_cap(run, index) or _check(run, raw)
        text = checked if isinstance(checked, str) else _deduped(cache, checked)
        if text is not None:
            name = str((raw.get("function") or {}).get("name"))
            _decided(run, name, raw["id"], text, save=False, reused=not isinstance(checked, str))
            decided += 1
        elif isinstance(checked, Call):
            ready.append(checked)
    if decided:
        run.checkpoint()
    return ready


def _over_cap(run: LiveRun, index: int) -> str | None:
    """The refusal of a call past :data:`MAX_CALLS_PER_REPLY` in its reply."""
    if index < MAX_CALLS_PER_REPLY:
        return None
    return (
        f"Error: this reply asked for more than {MAX_CALLS_PER_REPLY} tool calls; only the "
        f"first {MAX_CALLS_PER_REPLY} were considered and this one (number {index + 1}) was "
        "not run. Ask again for what you still need."
    )


def _decided(
    run: LiveRun, tool: str, call_id: str, text: str, *, save: bool = True, reused: bool = False
) -> None:
    """Answer a call the code decided (refused, or answered from an identical earlier
    call's result when ``reused``) in words, without running it."""
    extra = {"deduplicated": True} if reused else {}
    run.emit(
        "tool_result",
        tool=tool,
        call_id=call_id,
        ms=0.0,
        ok=reused,
        decided=True,
        result=text[:200],
        **extra,
    )
    record_result(run, call_id, text, save=save)


async def _run_concurrently(run: LiveRun, calls: list[Call]) -> None:
    """Run ``calls`` at once. One may stop the run (a child waiting for a person:
    the run is saved, stopped, then) while others go on; once they have all
    ended, the run is saved again, with what they spent and returned."""
    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(run_call, run, call)
    if run.state.status is not Status.RUNNING:
        run.save_held()


async def _run_gated(run: LiveRun, call: Call) -> bool:
    """Run one call after its gate (a write in doubt settled by its reconcile hook
    first, if it has one); False if the run stopped to wait for a human."""
    settled = await _settled(run, call)
    if settled is not None:
        return settled
    decision = gate(run, call)
    if isinstance(decision, str):
        _decided(run, call.tool.name, call.id, decision)
    elif isinstance(decision, Interruption):
        stop_for_human(run, decision)
        return False
    else:
        await run_call(run, call)
    return True


async def _settled(run: LiveRun, call: Call) -> bool | None:
    """For a write in doubt whose tool can be asked (and that nobody decided on):
    True once settled (done: its result recorded; not done: run again), False if
    the run stopped for a human; None if there is nothing to settle."""
    tool, state = call.tool, run.state
    if tool.reconcile is None or not _doubtful(run, call) or _approved(run, call):
        return None
    if call.id in state.rejections:
        return None
    key, limit = idempotency_key(run, call.id), time_limit(run, tool)
    answer = await ask_world(run, tool, call.id, call.arguments, key, limit)
    if answer.outcome == "done":
        _decided(run, tool.name, call.id, settled_text(tool.name, answer))
    elif answer.outcome == "not_done":
        await run_call(run, call)
    else:
        reason = (
            f"{tool.name} started before the process stopped and its outcome is unknown "
            f"(its reconcile check could not tell: {answer.said}); approve to run it "
            "again, or reject saying what happened"
        )
        stop_for_human(run, _waiting(run, call, InterruptionKind.UNKNOWN_OUTCOME, reason))
        return False
    return True


def stop_for_human(run: LiveRun, interruption: Interruption) -> None:
    """End the run ``interrupted`` until a human decides on the call."""
    if interruption.kind is InterruptionKind.APPROVAL and interruption.run_id == run.state.run_id:
        run.emit(
            "approval_required",
            tool=interruption.tool,
            call_id=interruption.call_id,
            args=interruption.arguments,
        )
    if run.state.status is Status.RUNNING:
        run.finish(
            Exit(status=Status.INTERRUPTED, reason=interruption.reason, interruption=interruption)
        )


def time_limit(run: LiveRun, tool: Tool) -> float:
    """Seconds ``tool`` may run per call (``inf``: no limit)."""
    limit = tool.timeout_s if tool.timeout_s is not None else run.agent.policy.tool_timeout_s
    return float("inf") if limit is None else limit


def _context(run: LiveRun, call: Call, started: float, limit: float) -> ToolContext:
    def progress(label: str) -> None:
        elapsed = (trio.current_time() - started) * 1000
        run.emit(
            "tool_progress",
            tool=call.tool.name,
            call_id=call.id,
            label=label,
            elapsed_ms=round(elapsed, 1),
        )

    def spawn(
        agent: ChildAgent, task: str, *, limits: Limits | None = None, deps: Any = None
    ) -> Awaitable[str]:
        if not isinstance(agent, Agent):
            raise ConfigError(f"run_child starts an Agent, not {type(agent).__name__}")
        return run.runner.spawn_child(run, call.id, agent, task, limits=limits, deps=deps)

    return ToolContext(
        run_id=run.state.run_id,
        call_id=call.id,
        tool=call.tool.name,
        idempotency_key=idempotency_key(run, call.id),
        max_result_bytes=run.agent.policy.max_result_bytes,
        timeout_s=None if limit == float("inf") else limit,
        deps=run.deps,
        hold=lambda usd: remote(run, call.id, usd),
        progress=progress,
        spawn=spawn,
    )


def idempotency_key(run: LiveRun, call_id: str) -> str:
    """A key for one logical call that no crash or resume changes.

    Made of the tree's root run id and the call path from the root down to
    this call (each level's call id), never of a run id minted later.
    """
    path = [node.state.parent_call_id or "" for node in run.lineage()][-2::-1]
    return "/".join([run.state.root_id, *path, call_id])


def _mark_started(run: LiveRun, call: Call) -> None:
    """Save that ``call`` starts, before it runs (a write left without result is
    then *in doubt*). An approval of a write is spent here: it covers this one
    attempt, so a crash during it asks a human again. Reads need no marker."""
    if call.tool.read_only:
        return
    run.state.started.append(call.id)
    if not call.tool.idempotent:
        run.state.approvals = [a for a in run.state.approvals if a.call_id != call.id]
    run.checkpoint()


async def run_call(run: LiveRun, call: Call) -> None:
    """Run one tool call, within its time limit, and record its result (or the
    run's stop).

    Cancellation: a checkpoint. The call's own scope stops it at its time
    limit (see the module docstring); a cancel of the run goes on up, with no
    result recorded (a write is then in doubt).

    Raises:
        LeaseLost: the started marker of a write could not be saved: the
            write did not start.
    """
    _mark_started(run, call)
    run.emit("tool_start", tool=call.tool.name, call_id=call.id, args=call.arguments)
    started, limit = trio.current_time(), time_limit(run, call.tool)
    outcome: Outcome | None = None
    timed_out = False
    ctx = _context(run, call, started, limit)
    if not call.tool.read_only:
        await _pause_before_effect()
    if limit == float("inf"):  # no scope to set up (and to unwind when the tree is cancelled)
        outcome = await _outcome(run, call, ctx)
    else:
        with trio.move_on_after(limit) as scope:
            outcome = await _outcome(run, call, ctx)
        timed_out = scope.cancelled_caught
    if isinstance(outcome, Interruption):  # a descendant stopped for a human: so does this run
        stop_for_human(run, outcome)
        return
    if isinstance(outcome, ChildPending):  # runs again from the top once its child ended
        _park(run, call, outcome)
        return
    ms = round((trio.current_time() - started) * 1000, 1)
    run.charge(Usage(tool_runs=1))
    if outcome is None or timed_out:
        _timed_out(run, call, limit, ms)
        return
    if isinstance(outcome, ToolOutcomeUnknown):
        _lost_touch(run, call, outcome, ms)
        return
    text, ok, exit_ = outcome
    run.emit("tool_result", tool=call.tool.name, call_id=call.id, ms=ms, ok=ok)
    record_result(run, call.id, text, save=not _answered_by_child(run, call))
    if exit_ is not None and run.state.status is Status.RUNNING:
        run.finish(exit_)


def _park(run: LiveRun, call: Call, pending: ChildPending) -> None:
    """``call`` waits for a child run executing elsewhere: no result, the run parks.

    A write's started marker is taken back: the call runs again, as a whole,
    once its child has ended (only idempotent writes park: see :func:`may_park`).
    """
    run.parked = True
    if pending.child_id not in run.state.awaiting:
        run.state.awaiting.append(pending.child_id)
    if call.id in run.state.started:
        run.state.started.remove(call.id)
    run.emit("tool_waiting", tool=call.tool.name, call_id=call.id, child_id=pending.child_id)


def _answered_by_child(run: LiveRun, call: Call) -> bool:
    """Whether ``call`` is a read answered by a child run: the answer is saved with
    the child and the call is bound to it, so a crash runs the read again and it
    gets the saved answer back (the parent need not be saved for it)."""
    return call.tool.read_only and call.id in run.state.children


async def _pause_before_effect() -> None:
    """End the task step between a write's started marker and its effect.

    The marker is saved synchronously, on the trio thread. A process frozen
    during that save (``SIGSTOP``, a paused VM) would otherwise go straight
    on into the write when it wakes, within the same task step, before a
    loop instrument (a worker's stall watch, which asks whether the process
    was declared dead meanwhile) has had a chance to look. Not a cancel
    point: a cancel is taken at the tool's own first checkpoint, as before.
    """
    await trio.lowlevel.cancel_shielded_checkpoint()


Outcome = tuple[str, bool, Exit | None] | Interruption | ToolOutcomeUnknown | ChildPending
"""A finished call: its result text, whether it succeeded, the run's exit if
that is fatal; or the wait for a human a child run stopped on; or a write
whose effect is unknown; or a child that has not ended (the call parks)."""


async def _outcome(run: LiveRun, call: Call, ctx: ToolContext) -> Outcome:
    """Run the tool; a failure becomes data (``trio.Cancelled`` is not an Exception)."""
    try:
        return await call.tool.run(call.arguments, ctx), True, None
    except FinalOutput as given:  # the output tool, called with arguments that fit
        run.state.output = given.value
        return OUTPUT_TAKEN, True, Exit(status=Status.COMPLETED, reason=ANSWERED)
    except ChildWaiting as waiting:
        return waiting.interruption
    except ChildPending as pending:
        return pending
    except ToolOutcomeUnknown as exc:
        return exc if not call.tool.read_only else _on_error(run, call, exc)
    except Exception as exc:
        return _on_error(run, call, exc)


def exception_type(exc: BaseException) -> str:
    """The exception's class, fully qualified (``ValueError``, ``httpx.ReadTimeout``)."""
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _timed_out(run: LiveRun, call: Call, limit: float, ms: float) -> None:
    """A read that ran out of time is answered so; a write is in doubt: stop for a human."""
    name, read_only = call.tool.name, call.tool.read_only
    run.emit(
        "tool_result",
        tool=name,
        call_id=call.id,
        ms=ms,
        ok=False,
        timed_out=True,
        in_doubt=not read_only,
    )
    if read_only:
        text = f"Error: {name} timed out after {limit:g} s and was stopped; it returned nothing."
        record_result(run, call.id, text)
        return
    _in_doubt(run, call, f"{name} timed out after {limit:g} s")


def _lost_touch(run: LiveRun, call: Call, exc: ToolOutcomeUnknown, ms: float) -> None:
    """A write that lost touch with what it acted on (e.g. its MCP server died)."""
    run.emit(
        "tool_error",
        tool=call.tool.name,
        call_id=call.id,
        error_type=exception_type(exc),
        error=redact(valid_text(str(exc)))[:1000],
        in_doubt=True,
        ms=ms,
    )
    _in_doubt(run, call, f"{call.tool.name} failed mid-call ({redact(valid_text(str(exc)))[:300]})")


def _in_doubt(run: LiveRun, call: Call, what: str) -> None:
    """Stop for a human: ``call`` (a write) may or may not have taken effect."""
    retry = (
        "resume to run it again with the same idempotency key"
        if call.tool.idempotent
        else "approve to run it again"
    )
    reason = (
        f"{what} and its outcome is unknown (it may or may not have taken effect); "
        f"{retry}, or reject saying what happened"
    )
    stop_for_human(run, _waiting(run, call, InterruptionKind.UNKNOWN_OUTCOME, reason))


def _on_error(run: LiveRun, call: Call, exc: Exception) -> tuple[str, bool, Exit | None]:
    """The failed call's result text, and the run's exit if the policy makes it fatal.

    Both are redacted of secrets (a tool's error may quote a key or a header).
    Emits ``tool_error`` with the exception's type and message.
    """
    said = valid_text(str(exc))  # a tool's words may quote what it read: keep them storable
    run.emit(
        "tool_error",
        tool=call.tool.name,
        call_id=call.id,
        error_type=exception_type(exc),
        error=said[:1000],
    )
    policy = run.agent.policy
    text = bound_result(redact(policy.error_text(call.tool.name, exc)), policy.max_result_bytes)
    message = redact(said)
    if isinstance(exc, policy.permanent_errors):
        why = f"{call.tool.name} failed in a way retrying cannot fix: {message}"
    elif policy.fatal_errors:
        why = f"{call.tool.name} failed: {message}"
    else:
        return text, False, None
    return (
        text,
        False,
        Exit(status=Status.FAILED, reason=why, error=f"{type(exc).__name__}: {message}"),
    )
