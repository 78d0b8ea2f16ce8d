"""The run loop, in layers: limits → model call → tool dispatch → recording.

:func:`drive` repeats one step until the run leaves ``running``. Each step
first drains *pending* calls (tool calls of the last assistant message that
have no result yet) and asks the model only when nothing is pending, so a
fresh run, a resumed run and an approved call all take the same path.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any, TypeVar

import attrs
import trio

from .._exceptions import ProviderError, ProviderReplyError
from .._model.margin import Margin
from .._model.provider import ChatRequest
from .._model.reply import MAX_REPLY_TOKENS, ChatReply, fresh_id
from .._model.retry import complete_with_retries
from .._money import to_usd
from .._output import correction, is_correction
from .._state import Interruption, InterruptionKind, RunState, Status, Usage
from .._storable import NotStorable, storable_message, valid_text
from .._stores.contract import StreamNote
from . import wind_down
from .answers import LOOK_NOTE, answer_exit, must_look, tool_ran
from .budget import Grant, charge_partial, check_turns, overspent_reason, reserve, settle
from .budget_note import budget_note
from .dispatch import dispatch, flush_results, pending_calls, record_result
from .run import Exit, LiveRun
from .stops import check_stops
from .top_up import stop_at_limit

__all__ = ["drive"]


async def drive(run: LiveRun, *, one_step: bool = False) -> None:
    """Run until the state leaves ``running``; with ``one_step``, one step only.

    A step: the pending tool calls (calls of the last assistant message with
    no result yet), or else one model call; then the stop conditions
    (:mod:`orchestra._core.stops`). Every step is saved before the next begins,
    so a worker over a durable-execution engine runs a run's steps in one go
    too (see :mod:`orchestra.distributed`). The steps are inline, not a function of
    their own: every run of a tree sits under this frame, and a cancel
    unwinds (and frees) every frame of every run.

    Cancellation: a checkpoint at every model call and tool run. On cancel the
    state is as of the last completed step; the caller records the exit.
    """
    run.parked = False
    while run.state.status is Status.RUNNING:
        flush_results(run)
        pending = pending_calls(run.state)
        await (dispatch(run, pending) if pending else model_step(run))
        if run.parked:  # a call waits for a child executing elsewhere: this step ends
            return
        if run.state.status is Status.RUNNING:
            flush_results(run)
            if (stop := check_stops(run)) is not None:
                run.finish(stop)
        if one_step:
            return


_T = TypeVar("_T")


@attrs.frozen(kw_only=True)
class _Ask:
    """One model call being made: the request, our count of it, its reservation."""

    request: ChatRequest
    prompt_tokens: int
    margin: Margin
    grant: Grant


async def model_step(run: LiveRun) -> None:
    """Check limits, reserve, call the model, record the reply (or, at the end of
    a run that winds down, make its final call: see :mod:`orchestra._core.wind_down`)."""
    margin = run.runner.pricing.margin_for(run.state.model)
    if wind_down.wound(run):
        await _final_step(run, wind_down.pending(run), margin)
        return
    output = run.agent.output
    request = ChatRequest(
        model=run.route[1],
        messages=_with_budget_note(run),
        tools=run.agent.tool_specs(),
        tool_choice=_tool_choice(run),
        response_format=None if output is None else output.response_format(),
        settings=run.state.settings,
    )
    prompt_tokens = run.counter.count(request.messages, request.declarations())
    gate = await run.decided(partial(_gate, run, prompt_tokens, len(request.messages), margin))
    if isinstance(gate, wind_down.WindDown):
        await _final_step(run, gate, margin)
    elif isinstance(gate, Exit):
        stop_at_limit(run, gate)  # or asks for more (on_limit="ask")
    else:
        ask = _Ask(request=request, prompt_tokens=prompt_tokens, margin=margin, grant=gate)
        called = await _call(run, ask)
        if called is not None:
            record_reply(run, *called, gate)


async def _final_step(run: LiveRun, wind: wind_down.WindDown, margin: Margin) -> None:
    """The end of a run that winds down: at its budget's end, what its tools returned
    handed back; else a final call, no tools, at most its reserve (or, if that
    cannot be paid, what its tools returned)."""
    stop = Exit(status=wind.status, reason=wind.reason)
    if wind.status is Status.BUDGET_EXCEEDED:
        wind_down.abandon(run)  # a wind-down begun by an older version
        wind_down.hand_back(run, stop)
        return
    wind_down.begin(run, wind)
    model, settings = run.route[1], run.state.settings
    request = ChatRequest(model=model, messages=run.state.messages, settings=settings)
    prompt_tokens = run.counter.count(request.messages, request.tools)
    wanted = min(run.reply_cap, run.state.limits.wind_down_tokens or 1)
    decide = partial(reserve, run, prompt_tokens, len(request.messages), margin, wanted)
    gate = await run.decided(decide)
    if isinstance(gate, Exit):  # not even the final call can be paid
        wind_down.abandon(run)
        if gate.status is Status.BUDGET_EXCEEDED and run.overspent() is None:
            wind_down.hand_back(run, attrs.evolve(stop, reason=f"{stop.reason}; {gate.reason}"))
        else:
            run.finish(gate)
        return
    ask = _Ask(request=request, prompt_tokens=prompt_tokens, margin=margin, grant=gate)
    called = await _call(run, ask)
    if called is not None:
        record_final(run, called[0], called[1], wind)


def record_final(run: LiveRun, reply: ChatReply, usage: Usage, wind: wind_down.WindDown) -> None:
    """Keep the final reply and stop with the limit's status: its prose is the
    run's answer, marked partial; calls it makes anyway are answered, never run."""
    state = run.state
    wind_down.end(run)
    if _append_and_stop_if_over(run, reply, usage):
        return
    text = _text(reply.message).strip()
    _not_run(run, reply, "Error: not run. This was the run's final reply; no tool runs now.")
    state.answer_partial = bool(text) and not reply.tool_calls
    said = "a final answer from what it had" if state.answer_partial else "no final answer"
    run.finish(Exit(status=wind.status, reason=f"{wind.reason}: wound down to {said}"))


def _with_budget_note(run: LiveRun) -> list[dict[str, Any]]:
    """The transcript, and what the run has left if its agent shows it (the note is
    in the request only, never in the transcript)."""
    if not run.agent.budget_note:
        return run.state.messages
    return [*run.state.messages, {"role": "system", "content": budget_note(run)}]


def _tool_choice(run: LiveRun) -> str | None:
    """``required`` until a tool ran, if the run's agent looks first."""
    if not run.agent.look_first or tool_ran(run.state.messages):
        return None
    return "required"


LOOK_MAX_TOKENS = 512
"""Most tokens of a reply that must be a tool call (a model that writes a plan
instead is stopped early, then told, see :func:`~orchestra._core.answers.must_look`)."""


def _gate(
    run: LiveRun, prompt_tokens: int, messages: int, margin: Margin
) -> Grant | Exit | wind_down.WindDown:
    """The turn limit, then the reservation of the call's worst case (a reply that
    must be a tool call is held to :data:`LOOK_MAX_TOKENS`), or the run's end if
    it winds down."""
    wanted = run.reply_cap
    if must_look(run.agent.look_first, run.state.messages):
        wanted = min(wanted, LOOK_MAX_TOKENS)
    stop = check_turns(run)
    if stop is not None or not wind_down.applies(run):
        return stop or reserve(run, prompt_tokens, messages, margin, wanted)
    due = wind_down.due(run)
    if due is not None:
        return due
    return wind_down.regular_grant(run, prompt_tokens, messages, margin, wanted)


async def _call(run: LiveRun, ask: _Ask) -> tuple[ChatReply, Usage] | None:
    """Ask the model (with retries); settle the reservation whatever happens."""
    run.emit(
        "model_request",
        turn=run.state.turns + 1,
        model=ask.request.model,
        prompt_tokens=ask.prompt_tokens,
        reserved_prompt_tokens=ask.grant.prompt,
        max_tokens=ask.grant.max_tokens,
    )
    reply: ChatReply | None = None
    cut: ProviderError | None = None
    usage = Usage()
    arrived = _Arrived(run, ask.grant)
    sized = attrs.evolve(
        ask.request,
        messages=list(ask.request.messages),
        max_tokens=ask.grant.max_tokens,
        listener=arrived,
    )
    try:
        reply = await complete_with_retries(
            partial(_attempt, run, sized, arrived),
            run.runner.retry,
            time_left=lambda: run.deadline - trio.current_time(),
            on_retry=partial(_retrying, run),
        )
    except _Cut as exc:
        cut = exc.error
    except ProviderError as exc:
        run.finish(_provider_exit(run, exc))
    finally:  # the note of the stream is cleared by the save that keeps its charge
        if reply is None and arrived.tokens:
            _record_cut(run, arrived)
        release = partial(settle, run, ask.grant, reply, arrived.tokens)
        ledger = run.runner.ledger
        if ledger is None:
            usage = release()
        else:
            with trio.CancelScope(shield=True):  # a reservation is always released
                usage = await ledger.released(run, release)
    if cut is not None:
        _after_cut(run, cut)
    if reply is None:
        return None
    run.cut_streams = 0
    if reply.usage_reported:
        run.runner.pricing.observe_prompt(
            run.state.model,
            ours=ask.prompt_tokens,
            theirs=reply.prompt_tokens,
            messages=len(ask.request.messages),
        )
    return reply, usage


class _Cut(Exception):
    """A streamed reply failed after part of it arrived: not retried in place (the
    part is charged first; the loop asks again within what is left)."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


@attrs.define(eq=False)
class _Arrived:
    """What a streamed reply delivered so far, by our counts (charged if it is cut).
    Each piece goes to the runner's live readers, and is noted in the store (if it
    keeps stream notes) before anything else sees it: if this process dies, a resume
    charges what had arrived."""

    run: LiveRun
    grant: Grant
    pieces: list[str] = attrs.Factory(list)
    tokens: int = 0
    tail: str = ""
    """The end of the text so far (at most :data:`LIVE_TEXT_KEPT`), as noted."""
    notes: bool = attrs.field(init=False)
    """Whether the runner's store keeps notes of streams (else none is made)."""

    @notes.default
    def _notes(self) -> bool:
        return self.run.runner.keeper.notes_streams

    def text(self, piece: str, tokens: int) -> None:
        self.pieces.append(piece)
        self.tokens += tokens
        if self.notes:
            self.tail = (self.tail + piece)[-LIVE_TEXT_KEPT:]
            self._note()
        self.run.runner.hub.delta(self.run, piece, tokens)

    def arguments(self, piece: str, tokens: int) -> None:
        self.tokens += tokens
        if self.notes:
            self._note()

    def _note(self) -> None:
        stream = StreamNote(
            text=self.tail, tokens=self.tokens, prompt=self.grant.prompt, cap=self.grant.max_tokens
        )
        self.run.runner.keeper.note_stream(self.run, stream)


async def _attempt(run: LiveRun, request: ChatRequest, arrived: _Arrived) -> ChatReply:
    """One call of the provider; its reply as it can be kept (see :func:`kept`).

    Raises:
        _Cut: a streamed reply failed after part of it arrived.
        ProviderError: the call failed (a reply that cannot be kept included).
    """
    try:
        return kept(await run.route[0].complete(request))
    except ProviderError as exc:
        if arrived.tokens:
            raise _Cut(exc) from exc
        raise


def kept(reply: ChatReply) -> ChatReply:
    """``reply`` as a run can keep it: where it enters, whatever the provider, lone
    surrogates in its text become U+FFFD (see :mod:`orchestra._storable`).

    Raises:
        ProviderReplyError: something else in its message cannot be kept (a
            custom provider's integer past 64 bits, a set...), or its token
            counts are not whole numbers from 0 to ``MAX_REPLY_TOKENS``.
    """
    labels = (reply.finish_reason, reply.model or "", reply.id or "")
    try:
        message = storable_message(reply.message)
    except NotStorable as exc:
        raise ProviderReplyError(f"the reply cannot be kept: {exc}") from None
    counts = (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens)
    if any(
        type(n) is not int or not 0 <= n <= MAX_REPLY_TOKENS
        for n in (*counts, reply.reasoning_tokens, reply.cache_write_tokens)
    ):
        raise ProviderReplyError(
            f"implausible token counts in the reply (each must be a whole number "
            f"from 0 to {MAX_REPLY_TOKENS:,})"
        )
    if message is reply.message and all(valid_text(t) is t for t in labels):
        return reply
    return attrs.evolve(
        reply,
        message=message,
        finish_reason=valid_text(reply.finish_reason),
        model=None if reply.model is None else valid_text(reply.model),
        id=None if reply.id is None else valid_text(reply.id),
    )


LIVE_TEXT_KEPT = 2000
"""Characters of it kept (its end)."""
CUT_TEXT_KEPT = 2000
"""Characters of a cut reply's text kept in its ``reply_cut`` event."""


def _record_cut(run: LiveRun, arrived: _Arrived) -> None:
    """Say what a cut stream delivered (kept with the run's events, never in its
    transcript: a partial reply is never taken for a reply)."""
    text = valid_text("".join(arrived.pieces))
    record_cut(run, text, arrived.tokens, run.cancel_reason or "")


def record_cut(run: LiveRun, text: str, tokens: int, reason: str) -> None:
    """The ``reply_cut`` event of a stream that delivered ``tokens`` and ``text``."""
    run.emit(
        "reply_cut",
        turn=run.state.turns + 1,
        tokens=tokens,
        text=text[:CUT_TEXT_KEPT],
        reason=reason or "the stream failed",
    )


def charge_lost_stream(run: LiveRun) -> None:
    """Charge a stream the process running ``run`` was reading when it stopped (a
    crash): the tokens noted as arrived, at the call's reserved prompt, at most its
    cap; said as ``reply_cut`` and saved (which clears the note: charged once)."""
    lost = run.runner.keeper.lost_stream(run)
    if lost is None:
        return
    charge_partial(run, lost.prompt, lost.cap, lost.tokens)
    record_cut(run, lost.text, lost.tokens, "the process reading it stopped (its spend is kept)")
    run.checkpoint()


def _after_cut(run: LiveRun, error: ProviderError) -> None:
    """A stream that failed midway: asked again (by the next step, within what is
    left), unless the failure is not transient or streams keep being cut."""
    run.cut_streams += 1
    retry = run.runner.retry
    if not retry.transient(error) or run.cut_streams >= retry.attempts:
        run.finish(_provider_exit(run, error))
    else:
        run.checkpoint()  # the cut's charge is kept before the next call is noted


def _retrying(run: LiveRun, attempt: int, error: ProviderError, wait: float) -> None:
    run.emit(
        "model_retry",
        turn=run.state.turns + 1,
        attempt=attempt,
        wait_s=round(wait, 3),
        error=valid_text(str(error)),
        status=getattr(error, "status_code", None),
    )


def _provider_exit(run: LiveRun, exc: ProviderError) -> Exit:
    """A transient failure that outlasted the retries stops the run resumable."""
    said = valid_text(str(exc))  # a server's words, echoed: kept storable
    if not run.runner.retry.transient(exc):
        return Exit(status=Status.FAILED, reason=f"model call failed: {said}", error=said)
    reason = f"the model provider is unavailable (retries ran out): {said}; resume later"
    waiting = Interruption(kind=InterruptionKind.PROVIDER_UNAVAILABLE, reason=reason)
    return Exit(status=Status.INTERRUPTED, reason=reason, error=said, interruption=waiting)


def record_reply(run: LiveRun, reply: ChatReply, usage: Usage, grant: Grant) -> None:
    """Append the reply, emit ``turn``, and end the run or leave its calls pending; saved
    once (with the exit, if the run ends).

    The run ends if the tree spent past a budget (``budget_exceeded``, saying
    by how much, never ``completed``) or if the reply is an answer. Of a reply
    cut at ``max_tokens`` only the calls the cut spared run (see :func:`_cut_reply`).
    """
    state = run.state
    before = len(state.messages)
    if _append_and_stop_if_over(run, reply, usage):
        return
    if not reply.tool_calls and must_look(run.agent.look_first, state.messages):
        state.messages.append(LOOK_NOTE)  # asked again, once, by the next step
        run.emit("look_first", turn=state.turns, message=LOOK_NOTE["content"])
        run.checkpoint()
    elif reply.finish_reason != "length" and not reply.tool_calls:
        if _fits(run, _text(reply.message)):
            names = frozenset(t.name for t in run.agent.tools)
            run.finish(answer_exit(state.messages[:before], _text(reply.message), names))
    else:
        run.checkpoint()
        if reply.finish_reason == "length":
            _cut_reply(run, reply, grant)


def _fits(run: LiveRun, text: str) -> bool:
    """Whether the answer ``text`` is one the run can end with: prose when the
    agent declares no output type; else JSON that fits it (kept as the run's
    output). One that does not fit is sent back to the model, saying why, at
    most ``output_retries`` times; then the run fails."""
    spec = run.agent.output
    if spec is None:
        return True
    checked = spec.check_text(text) if spec.via == "response_format" else spec.in_prose()
    if checked.error is None:
        run.state.output = checked.value
        return True
    sent = sum(1 for m in run.state.messages if is_correction(m))
    if sent >= run.agent.output_retries:
        why = f"the answer did not fit the required output ({checked.error})"
        run.finish(Exit(status=Status.FAILED, reason=f"{why}, after {sent} correction(s)"))
        return False
    note = correction(spec, checked.error)
    run.state.messages.append(note)
    run.emit("output_invalid", turn=run.state.turns, message=note["content"])
    run.checkpoint()
    return False


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _append_and_stop_if_over(run: LiveRun, reply: ChatReply, usage: Usage) -> bool:
    """Append the reply and emit ``turn``; True if the tree spent past a budget
    with it: then the run is finished ``budget_exceeded`` (saying by how much,
    the reply's calls answered, never run), saved with the reply in one save."""
    state = run.state
    state.messages.append(unique_call_ids(state, reply.message))
    run.emit("turn", turn=state.turns, **_turn_fields(run, reply, usage))
    over = run.overspent()
    if over is None:
        return False
    _not_run(run, reply, OVERSPENT_CALL)
    run.finish(Exit(status=Status.BUDGET_EXCEEDED, reason=overspent_reason(run, *over)))
    return True


def _cut_reply(run: LiveRun, reply: ChatReply, grant: Grant) -> None:
    """A reply that hit ``max_tokens``: budget_exceeded if the budget cut it, an
    answer if it is prose; else its whole calls (arguments that are a complete
    JSON object) run as any, and the one the cut broke is answered in words."""
    whole = [c for c in reply.tool_calls if _whole(c)] if not grant.shrunk else []
    if whole:
        for call in reply.tool_calls:
            if call not in whole:
                record_result(run, call["id"], CUT_CALL.format(max_tokens=grant.max_tokens))
        run.checkpoint()
        return
    _not_run(run, reply, CUT_CALL.format(max_tokens=grant.max_tokens))
    if grant.shrunk and run.state.limits.wind_down_tokens and reply.tool_calls:
        run.checkpoint()  # its next step winds down, with what it has
    elif grant.shrunk:
        reason = f"the reply was cut at {grant.max_tokens} tokens to stay within budget"
        run.finish(Exit(status=Status.BUDGET_EXCEEDED, reason=reason))
    elif not reply.tool_calls:
        run.finish(Exit(status=Status.COMPLETED, reason="answered (cut at max_tokens)"))
    else:
        run.checkpoint()


def _whole(call: dict[str, Any]) -> bool:
    """Whether a call's arguments are a complete JSON object (a call the cut spared)."""
    try:
        return isinstance(json.loads(call["function"]["arguments"]), dict)
    except (KeyError, TypeError, ValueError, RecursionError):
        return False


def _not_run(run: LiveRun, reply: ChatReply, text: str) -> None:
    """Answer each call of ``reply`` with ``text``, in the transcript (never run);
    saved with the run's next save."""
    for call in reply.tool_calls:
        record_result(run, call["id"], text, save=False)
    if reply.tool_calls:
        flush_results(run, save=False)


OVERSPENT_CALL = "Error: not run. The run's budget is spent."
"""The result of each tool call in a reply that spent past the budget."""
CUT_CALL = (
    "Error: not run. Your reply was cut at max_tokens ({max_tokens} tokens), so this call "
    "may be incomplete. Nothing was run; send the call again, with shorter arguments or "
    "fewer calls per reply."
)
"""The result of each tool call in a reply cut at ``max_tokens``."""


def unique_call_ids(state: RunState, message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with every tool call id unique within the whole run.

    Providers may omit ids or repeat them across turns (small local models
    do); approvals, rejections, results and idempotency keys are keyed by
    call id, so a repeated id would let one call's decision answer another.
    A missing or already used id becomes ``call_t{turn}_{index}`` (made unique
    if even that is taken). The reply is saved with these ids before any tool
    runs, so they never change afterwards.
    """
    calls = message.get("tool_calls")
    if not calls:
        return message
    used = {c.get("id") for m in state.messages for c in m.get("tool_calls") or ()}
    renamed = []
    for index, call in enumerate(calls):
        call_id = call.get("id")
        if not call_id or call_id in used:
            call_id = fresh_id(f"call_t{state.turns}_{index}", used)
            call = {**call, "id": call_id}
        used.add(call_id)
        renamed.append(call)
    return {**message, "tool_calls": renamed}


def _turn_fields(run: LiveRun, reply: ChatReply, usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "total_tokens": usage.tokens,
        "call_cost_usd": to_usd(usage.cost_pico),
        "cost_usd": to_usd(run.state.own.cost_pico),
        "tree_cost_usd": to_usd(run.state.tree.cost_pico),
        "finish": reply.finish_reason,
        "tool_calls": [c["function"]["name"] for c in reply.tool_calls],
        "usage_reported": reply.usage_reported,
        "response_model": reply.model,
        "response_id": reply.id,
        "streamed": reply.streamed,
        "time_to_first_chunk_s": reply.time_to_first_chunk_s,
    }
