"""Values from outside: kept, or refused in words; never a run left ``running``."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import httpx
import pytest

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    ConfigError,
    OpenAIProvider,
    Runner,
    SQLiteStore,
    Status,
    tool,
)
from orchestra._core.execute import new_state
from orchestra._model.provider import parse_reply
from orchestra._model.stream import Assembly
from orchestra._storable import (
    MAX_DEPTH,
    MAX_INT,
    MIN_INT,
    NotStorable,
    decoded,
    loads,
    problem,
    storable_message,
    valid_text,
)
from orchestra._tools import bound_result
from orchestra.testing import DONE, FakeProvider, tool_calls

LONE = '{"path":"errors\\ud83d.log"}'
"""Tool arguments whose path holds a lone surrogate escape (valid JSON, not Unicode)."""
BIG = "123456789012345678901234567890"
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
    "required": ["n", "s"],
    "additionalProperties": False,
}


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"read {path}"


def _statuses(store: SQLiteStore) -> list[str]:
    return [row.status.value for row in store.list_runs()]


# -- the checks ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (LONE, r"at \$\.path: the text holds a lone surrogate \(\\ud83d"),
        ('{"n": ' + BIG + "}", r"at \$\.n: the integer \(30 digits\) is outside"),
        ('{"n": -' + BIG + "}", r"at \$\.n: the integer"),
        ('{"n": NaN}', "NaN is not a JSON number"),
        ('{"n": 1e400}', r"at \$\.n: inf is not a JSON number"),
        ("[" * 3000 + "]" * 3000, "nested too deeply"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
        ('{"n": ' + "9" * 5000 + "}", "too many digits"),
        ("x" * 1_000_001, r"too large \(more than 1,000,000 bytes\)"),
        ("{", "not valid JSON"),
    ],
)
def test_what_cannot_be_kept_is_refused_saying_where_and_why(text: str, said: str) -> None:
    with pytest.raises(NotStorable, match=said):
        decoded(text)


def test_what_can_be_kept_is_decoded_as_json_reads_it() -> None:
    edge = {"min": MIN_INT, "max": MAX_INT, "emoji": "\ud83d\ude00", "pair": "😀", "f": 1.5}
    assert decoded(json.dumps(edge)) == json.loads(json.dumps(edge))
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert decoded(deepest) == json.loads(deepest)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"a": [1, {2}]}, r"at \$\.content\.a\[1\]: a set is not a JSON value"),
        ({1: "x"}, "the key 1 is not a string"),
        ({"k\udc80": 1}, "lone surrogate"),
        (MAX_INT + 1, "outside what can be kept"),
        (float("nan"), "nan is not a JSON number"),
    ],
)
def test_problem_names_the_first_value_that_cannot_be_kept(value: Any, said: str) -> None:
    assert re.search(said, problem({"content": value}) or "")
    if "surrogate" not in said:  # a message's text is kept, with U+FFFD
        with pytest.raises(NotStorable, match=said):
            storable_message({"role": "assistant", "content": value})


def test_prose_keeps_its_text_with_lone_surrogates_made_replacement_characters() -> None:
    text = "half \ud83d an emoji"
    assert valid_text(text) == "half \ufffd an emoji"
    plain = "nothing to do 😀"
    assert valid_text(plain) is plain
    message = {"role": "assistant", "content": text}
    assert storable_message(message) == {"role": "assistant", "content": "half \ufffd an emoji"}
    assert storable_message(DONE) is DONE
    assert bound_result("file_\udcff.txt", 4096) == "file_\ufffd.txt"


def test_a_reply_body_with_a_lone_surrogate_escape_is_a_reply() -> None:
    """orjson refuses such a body whole (the run was retried until it stopped)."""
    body = b'{"choices":[{"message":{"role":"assistant","content":"half \\ud83d"}}]}'
    response = httpx.Response(200, content=body, headers={"content-type": "application/json"})
    assert parse_reply(response).message["content"] == "half \ufffd"


async def test_an_error_body_with_a_lone_surrogate_is_said_storably(tmp_path: Any) -> None:
    body = b'{"error":{"message":"bad \\ud83d request"}}'
    transport = httpx.MockTransport(lambda request: httpx.Response(400, content=body))
    provider = OpenAIProvider(base_url="http://x/v1", transport=transport, stream=False)
    store = SQLiteStore(tmp_path / "s.db")
    result = await Runner(provider=provider, store=store).run(Agent(name="a", model="m"), "hi")
    assert result.status is Status.FAILED
    assert "answered 400: bad \ufffd request" in (result.state.reason or "")
    assert _statuses(store) == ["failed"]


def test_a_streamed_chunk_with_a_lone_surrogate_escape_is_read() -> None:
    assembly = Assembly(limit=None, listener=None, sent_at=0.0)
    for data in (
        '{"choices":[{"index":0,"delta":{"role":"assistant","content":"half "}}]}',
        '{"choices":[{"index":0,"delta":{"content":"\\ud83d emoji"},"finish_reason":"stop"}]}',
        "[DONE]",
    ):
        assembly.feed(data)
    assert assembly.body()["choices"][0]["message"]["content"] == "half \ufffd emoji"


@pytest.mark.parametrize("depth", [2000, 100_000])
def test_a_deep_body_with_a_lone_surrogate_is_refused_not_a_recursion_error(depth: int) -> None:
    with pytest.raises(ValueError, match=r"nested too deeply|depth"):
        loads('["\\ud83d", ' + "[" * depth + "]" * depth + "]")


# -- in runs ---------------------------------------------------------------------


async def test_arguments_with_a_lone_surrogate_are_the_models_error(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    provider = FakeProvider(tool_calls(("read_file", LONE)), DONE)
    agent = Agent(name="a", model="m", tools=[read_file])
    result = await Runner(provider=provider, store=store).run(agent, "read errors.log")
    assert result.status is Status.COMPLETED
    said = provider.requests[1].messages[-1]["content"]
    assert said.startswith("Error: invalid arguments for read_file: at $.path: the text holds")
    assert _statuses(store) == ["completed"]
    events = [e["type"] for e in store.events(result.run_id)]
    assert "tool_start" not in events  # it never ran


@pytest.mark.parametrize(
    "content",
    [
        '{"n": ' + BIG + ', "s": "x"}',
        '{"n": 1, "s": "x\\ud83d"}',
        "[" * 3000 + "]" * 3000,
    ],
)
async def test_a_structured_answer_that_cannot_be_kept_is_corrected(
    tmp_path: Any, content: str
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    fixed = {"role": "assistant", "content": '{"n": 1, "s": "x"}'}
    provider = FakeProvider({"role": "assistant", "content": content}, fixed)
    agent = Agent(name="a", model="m", output_type=SCHEMA)
    result = await Runner(provider=provider, store=store).run(agent, "answer")
    assert result.status is Status.COMPLETED
    assert result.output == {"n": 1, "s": "x"}
    assert provider.requests[1].messages[-1]["content"].startswith("Your answer does not fit")
    assert _statuses(store) == ["completed"]


async def test_an_answer_that_never_fits_fails_the_run_saying_why(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    provider = FakeProvider({"role": "assistant", "content": '{"n": ' + BIG + ', "s": "x"}'})
    agent = Agent(name="a", model="m", output_type=SCHEMA)
    result = await Runner(provider=provider, store=store).run(agent, "answer")
    assert result.status is Status.FAILED
    assert "the integer (30 digits) is outside what can be kept" in (result.state.reason or "")
    assert _statuses(store) == ["failed"]


async def test_final_answer_arguments_that_cannot_be_kept_are_refused(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    provider = FakeProvider(
        tool_calls(("final_answer", '{"n": ' + BIG + ', "s": "x"}')),
        tool_calls(("final_answer", {"n": 2, "s": "y"})),
    )
    agent = Agent(name="a", model="m", output_type=SCHEMA, output_via="tool")
    result = await Runner(provider=provider, store=store).run(agent, "answer")
    assert result.status is Status.COMPLETED
    assert result.output == {"n": 2, "s": "y"}
    assert "outside what can be kept" in provider.requests[1].messages[-1]["content"]


async def test_reply_text_with_a_lone_surrogate_is_kept_readable(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    provider = FakeProvider({"role": "assistant", "content": "half \ud83d emoji"})
    result = await Runner(provider=provider, store=store).run(Agent(name="a", model="m"), "hi")
    assert result.status is Status.COMPLETED
    assert result.answer == "half \ufffd emoji"
    assert store.load(result.run_id).messages[-1]["content"] == "half \ufffd emoji"


async def test_a_reply_that_cannot_be_kept_ends_the_run_with_a_reason(
    tmp_path: Any, autojump_clock: Any
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    provider = FakeProvider({"role": "assistant", "content": "x", "extra": {1, 2}})
    result = await Runner(provider=provider, store=store).run(Agent(name="a", model="m"), "hi")
    assert result.status is not Status.RUNNING
    assert "the reply cannot be kept: at $.extra: a set is not a JSON value" in (
        result.state.reason or ""
    )
    assert _statuses(store) == [result.status.value]


async def test_a_run_saved_running_with_such_arguments_resumes_to_an_end(tmp_path: Any) -> None:
    """What an earlier Orchestra left: the reply saved, its call's ``tool_start``
    unstorable, the run ``running``."""
    store = SQLiteStore(tmp_path / "s.db")
    agent = Agent(name="a", model="m", tools=[read_file])
    state = new_state(agent, "read errors.log", agent.limits)
    state.messages.append(tool_calls(("read_file", LONE)))
    store.save(state)
    result = await Runner(provider=FakeProvider(DONE), store=store).resume(state.run_id, agent)
    assert result.status is Status.COMPLETED
    tool_result = result.state.messages[-2]
    assert tool_result["role"] == "tool" and "lone surrogate" in tool_result["content"]
    assert _statuses(store) == ["completed"]


def test_a_task_that_is_not_valid_unicode_is_refused_before_the_run_exists() -> None:
    agent = Agent(name="a", model="m")
    with pytest.raises(ConfigError, match="lone surrogate"):
        new_state(agent, "read \udcff.log", agent.limits)


@pytest.mark.parametrize("tokens", [2**70, -1, 1.5])
async def test_a_custom_providers_implausible_usage_ends_the_run_with_a_reason(
    tmp_path: Any, autojump_clock: Any, tokens: Any
) -> None:
    class Implausible(FakeProvider):
        async def complete(self, request: ChatRequest) -> ChatReply:
            reply = await super().complete(request)
            return attrs.evolve(reply, completion_tokens=tokens)

    store = SQLiteStore(tmp_path / "s.db")
    runner = Runner(provider=Implausible(DONE), store=store)
    result = await runner.run(Agent(name="a", model="m"), "hi")
    assert "implausible token counts in the reply" in (result.state.reason or "")
    assert _statuses(store) == [result.status.value] != ["running"]
