"""Wind-down: a run stopped by a limit hands back what it found, marked partial."""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from orchestra import Agent, ChatReply, ChatRequest, Limits, Runner, Status, tool
from orchestra._core.wind_down import NOTE
from orchestra._model.tokens import count_completion, count_prompt
from orchestra._result import stop_sentence
from orchestra.testing import DONE, FakeProvider, tool_calls


@tool(read_only=True)
def read(n: int) -> str:
    """Read page n.

    Args:
        n: the page.
    """
    return f"page {n} says the worker timed out"


class Reader:
    """Reads a new page each turn while it has tools; without them, sums up."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        self.requests.append(request)
        pages = sum(m["role"] == "tool" for m in request.messages)
        if request.tools:
            message = tool_calls(("read", {"n": pages}))
            message["tool_calls"][0]["id"] = f"c{pages}"
        else:
            message = {"role": "assistant", "content": f"I read {pages} pages: a timeout."}
        return ChatReply(
            message=message,
            finish_reason="stop",
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=count_completion(message),
        )


def reader(**limits: Any) -> Agent:
    return Agent(name="reader", model="m", tools=(read,), limits=Limits(**limits))


async def test_the_last_turn_is_a_final_answer_without_tools_marked_partial():
    provider = Reader()
    result = await Runner(provider=provider).run(reader(max_turns=4, wind_down_tokens=64), "q")
    state = result.state
    assert (state.status, state.turns) == (Status.MAX_TURNS_EXCEEDED, 4)
    assert state.answer_partial and result.answer == "I read 3 pages: a timeout."
    assert state.reason == "turn limit one call away: wound down to a final answer from what it had"
    assert state.messages[-2] == NOTE
    assert [bool(r.tools) for r in provider.requests] == [True, True, True, False]
    assert provider.requests[-1].max_tokens == 64


async def test_without_wind_down_the_same_run_hands_back_nothing():
    result = await Runner(provider=Reader()).run(reader(max_turns=4), "q")
    assert result.status is Status.MAX_TURNS_EXCEEDED
    assert result.answer is None and not result.answer_partial


async def test_at_its_budgets_end_a_run_hands_back_what_its_tools_returned():
    provider = Reader()
    result = await Runner(provider=provider).run(
        reader(max_budget_usd=0.01, wind_down_tokens=100), "q"
    )
    state = result.state
    assert state.status is Status.BUDGET_EXCEEDED and state.answer_partial
    assert state.reason == "budget nearly spent: handed back what its tools returned"
    assert state.tree.cost_pico <= (state.limits.budget_pico or 0)
    assert all(r.tools for r in provider.requests)  # no final call: no budget for one
    answer = result.answer or ""
    assert answer.startswith("[Written by Orchestra, not the model: budget nearly spent")
    results = [m["content"] for m in state.messages if m["role"] == "tool"]
    assert results and all(r[:100] in answer for r in results)


async def test_no_wind_down_before_anything_was_found():
    provider = FakeProvider(DONE)
    result = await Runner(provider=provider).run(reader(max_turns=1, wind_down_tokens=64), "q")
    assert result.status is Status.COMPLETED and provider.requests[0].tools


async def test_a_child_hands_its_partial_answer_to_its_parent():
    child = reader(max_turns=3, wind_down_tokens=64)
    parent = Agent(
        name="parent",
        model="p",
        tools=(child.as_tool(name="research"),),
        limits=Limits(max_turns=5),
    )
    spawn = tool_calls(("research", {"question": "why?"}))
    both = _Both(FakeProvider(spawn, {"role": "assistant", "content": "it timed out"}), Reader())
    result = await Runner(provider=both).run(parent, "why did it fail?")
    [kid] = result.children
    assert kid.answer_partial and kid.status is Status.MAX_TURNS_EXCEEDED
    handed = next(m["content"] for m in result.state.messages if m["role"] == "tool")
    assert handed == stop_sentence(kid)
    assert handed.endswith("Its partial answer, from what it found: I read 2 pages: a timeout.")
    assert result.answer == "it timed out"


class _Both:
    """The parent's model and the child's, by the request's model name."""

    def __init__(self, parent: FakeProvider, child: Reader) -> None:
        self.parent, self.child = parent, child

    async def complete(self, request: ChatRequest) -> ChatReply:
        model = self.parent if request.model == "p" else self.child
        return await model.complete(request)


async def test_the_budget_note_is_in_each_request_only():
    provider = FakeProvider(tool_calls(("read", {"n": 1})), DONE)
    agent = Agent(
        name="a",
        model="m",
        tools=(read,),
        limits=Limits(max_turns=8, max_budget_usd=0.5, timeout_s=60),
        budget_note=True,
    )
    result = await Runner(provider=provider).run(agent, "q")
    notes = [r.messages[-1]["content"] for r in provider.requests]
    assert notes[0] == "Left for this task: 8 of 8 model calls, $0.5000 of $0.5000, 60 s."
    assert notes[1].startswith("Left for this task: 7 of 8 model calls, $0.4")
    assert all(m["role"] != "system" for m in result.state.messages)
    assert json.dumps(result.state.messages).count("Left for this task") == 0


async def test_a_deadline_one_call_away_winds_down(autojump_clock):
    class Slow(Reader):
        async def complete(self, request: ChatRequest) -> ChatReply:
            await trio.sleep(10)
            return await super().complete(request)

    result = await Runner(provider=Slow()).run(reader(timeout_s=35, wind_down_tokens=64), "q")
    assert result.status is Status.DEADLINE_EXCEEDED and result.answer_partial
    assert result.answer == "I read 2 pages: a timeout."


async def test_the_command_line_and_the_console_say_partial():
    from orchestra._views.printed import _footer
    from orchestra._views.text import Node
    from orchestra.console._tree_view import _note

    result = await Runner(provider=Reader()).run(reader(max_turns=3, wind_down_tokens=64), "q")
    report = result.summary()
    note = Node.of(report).note
    assert note.startswith("partial answer: I read 2 pages: a timeout. (turn limit one call")
    footer = [str(line) for line in _footer(report)]
    assert footer[0] == "\nanswer (partial, at a limit): I read 2 pages: a timeout."
    html = str(_note(result.state))
    assert "partial answer: I read 2 pages" in html and "note answer partial" in html


async def test_a_final_reply_past_the_budget_says_so_like_any_reply():
    class Overspends(Reader):
        async def complete(self, request: ChatRequest) -> ChatReply:
            reply = await super().complete(request)
            if request.tools:
                return reply
            return attrs.evolve(reply, completion_tokens=100_000)  # ignores max_tokens

    result = await Runner(provider=Overspends()).run(
        reader(max_turns=3, max_budget_usd=0.5, wind_down_tokens=100), "q"
    )
    assert result.status is Status.BUDGET_EXCEEDED and not result.answer_partial
    assert (result.state.reason or "").startswith("over budget: ")
