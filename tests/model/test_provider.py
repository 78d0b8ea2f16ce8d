"""Parsing chat-completions replies: hostile or broken bodies are ProviderErrors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from orchestra import OpenAIProvider, ProviderHTTPError, ProviderReplyError
from orchestra._model.provider import ChatRequest, parse_reply

DEEP = "[" * 100_000 + "]" * 100_000


def body(
    *, usage: dict[str, Any] | None = None, calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A chat-completions body: an answer, or ``calls``, with ``usage``."""
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else "hi"}
    if calls:
        message["tool_calls"] = calls
    return {
        "choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": usage if usage is not None else {"prompt_tokens": 10, "completion_tokens": 2},
    }


def call(call_id: str | None, arguments: Any = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": arguments}}


def parse(payload: dict[str, Any]) -> Any:
    return parse_reply(httpx.Response(200, json=payload))


def test_a_plain_reply_is_parsed():
    reply = parse(body(usage={"prompt_tokens": 0, "completion_tokens": 10_000_000}))
    assert reply.message == {"role": "assistant", "content": "hi"}
    assert (reply.prompt_tokens, reply.completion_tokens, reply.finish_reason) == (
        0,
        10_000_000,
        "stop",
    )


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-119, "-119"),
        (3.5, "3.5"),
        (7.0, "7.0"),
        (True, "True"),
        ("12", "'12'"),
        (None, "None"),
        (10_000_001, "10000001"),
    ],
)
def test_implausible_usage_is_refused_naming_the_field(field, value, shown):
    usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 2, field: value}
    with pytest.raises(ProviderReplyError) as caught:
        parse(body(usage=usage))
    assert f"usage.{field} in the reply: {shown} " in str(caught.value)


def test_cached_and_reasoning_tokens_are_read_from_the_usage_details():
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    reply = parse(body(usage=usage))
    assert (reply.cached_tokens, reply.reasoning_tokens) == (64, 30)
    for absent in ({}, {"prompt_tokens_details": None, "completion_tokens_details": {}}):
        reply = parse(body(usage={"prompt_tokens": 100, "completion_tokens": 40, **absent}))
        assert (reply.cached_tokens, reply.reasoning_tokens) == (0, 0)


@pytest.mark.parametrize(
    ("details", "value"),
    [
        ("prompt_tokens_details.cached_tokens", 101),
        ("prompt_tokens_details.cached_tokens", -1),
        ("completion_tokens_details.reasoning_tokens", "30"),
        ("completion_tokens_details.reasoning_tokens", 41),
    ],
)
def test_implausible_usage_details_are_refused_naming_the_field(details, value):
    group, field = details.split(".")
    usage = {"prompt_tokens": 100, "completion_tokens": 40, group: {field: value}}
    with pytest.raises(ProviderReplyError, match=rf"usage\.{details} in the reply"):
        parse(body(usage=usage))


def test_a_huge_usage_string_is_shown_shortened():
    usage = {"prompt_tokens": "9" * 10_000, "completion_tokens": 1}
    with pytest.raises(ProviderReplyError, match=r"usage\.prompt_tokens") as caught:
        parse(body(usage=usage))
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    "text",
    [
        DEEP,
        '{"choices": ' + DEEP + "}",
        '{"choices": [{"message": {"content": ' + DEEP + "}}]}",
    ],
)
def test_a_deeply_nested_reply_is_a_reply_error(text):
    response = httpx.Response(200, text=text, headers={"content-type": "application/json"})
    with pytest.raises(ProviderReplyError, match="nested too deeply"):
        parse_reply(response)


async def test_a_deeply_nested_error_body_is_an_http_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text='{"error": ' + DEEP + "}")

    provider = OpenAIProvider(base_url="http://x.test/v1", transport=httpx.MockTransport(handler))
    try:
        with pytest.raises(ProviderHTTPError, match="answered 500") as caught:
            await provider.complete(ChatRequest(model="m", messages=[]))
    finally:
        await provider.aclose()
    assert caught.value.status_code == 500


def test_missing_and_repeated_call_ids_are_made_unique_within_a_message():
    reply = parse(body(calls=[call(None), call(""), call("a_2"), call("a"), call("a"), call("a")]))
    ids = [c["id"] for c in reply.tool_calls]
    assert ids[:4] == ["call_0", "call_1", "a_2", "a"]
    assert len(set(ids)) == len(ids) == 6


def test_arguments_sent_as_an_object_become_json_text():
    reply = parse(body(calls=[call("c1", {"path": "errors.log"}), call("c2", None)]))
    assert [c["function"]["arguments"] for c in reply.tool_calls] == ['{"path": "errors.log"}', ""]


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("7", 7.0),
        (" 0 ", 0.0),
        ("Wed, 02 Dec 2026 12:00:30 GMT", 30.0),
        ("Wed, 02 Dec 2026 11:59:00 GMT", 0.0),  # already past
        ("99999999999", 86400.0),
        ("soon", None),
        ("-5", None),
        ("1.5e3", None),
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(header, seconds):
    from datetime import UTC, datetime

    from orchestra._model.provider import retry_after

    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
    assert retry_after(header, now=now) == seconds


# -- tool calls written as JSON text (recover_tool_calls=True) ---------------------------------

TOOL_SPECS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": {}}}
    for n in ("read_file", "list_files")
]
READ = '{"name": "read_file", "arguments": {"path": "errors.log"}}'


async def reply_of(
    message: dict[str, Any], finish: str, usage: dict[str, int], recover: bool
) -> Any:
    """The reply an OpenAIProvider makes of a 200 body holding ``message``."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = {"choices": [{"message": message, "finish_reason": finish}], "usage": usage}
        return httpx.Response(200, json=body)

    provider = OpenAIProvider(
        base_url="http://x.test/v1",
        transport=httpx.MockTransport(handler),
        recover_tool_calls=recover,
    )
    try:
        return await provider.complete(ChatRequest(model="m", messages=[], tools=TOOL_SPECS))
    finally:
        await provider.aclose()


async def answer_with(content: str, *, recover: bool = True, calls: Any = None) -> Any:
    """The reply an OpenAIProvider makes of a body whose message has ``content``."""
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    return await reply_of(message, "stop", {"prompt_tokens": 10, "completion_tokens": 20}, recover)


def called(reply: Any) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls
    ]


@pytest.mark.parametrize(
    "content",
    [
        READ,
        f"  {READ}\n",
        f"```json\n{READ}\n```",
        f"```\n{READ}\n```",
        f"<tool_call>\n{READ}\n</tool_call>",
        f"I will read the log first.\n<tool_call>{READ}</tool_call>",
        '{"name": "read_file", "parameters": {"path": "errors.log"}}',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"errors.log\\"}"}',
        f'{{"type": "function", "function": {READ}}}',
        f"[{READ}]",
    ],
    ids=[
        "bare",
        "bare-padded",
        "fenced-json",
        "fenced",
        "tagged",
        "tagged-after-prose",
        "parameters",
        "arguments-as-string",
        "nested-function",
        "list",
    ],
)
async def test_a_call_written_as_json_text_becomes_a_tool_call(content):
    reply = await answer_with(content)
    assert called(reply) == [("read_file", {"path": "errors.log"})]
    [call_] = reply.tool_calls
    assert call_["id"].startswith("call_") and call_["type"] == "function"
    assert isinstance(call_["function"]["arguments"], str)
    assert reply.message["content"] is None and reply.finish_reason == "tool_calls"


async def test_several_tagged_calls_each_get_a_fresh_id():
    content = (
        '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>\n'
        f"<tool_call>{READ}</tool_call>"
    )
    first, second = await answer_with(content), await answer_with(content)
    assert called(first) == [("list_files", {}), ("read_file", {"path": "errors.log"})]
    ids = [c["id"] for c in first.tool_calls + second.tool_calls]
    assert len(set(ids)) == 4


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "delete_everything", "arguments": {}}',
        f'<tool_call>{READ}</tool_call><tool_call>{{"name": "rm", "arguments": {{}}}}</tool_call>',
        "The log says worker 7 timed out.",
        '{"answer": "worker 7 timed out"}',
        '{"name": "read_file", "arguments": {"path": "errors.log"}',
        f"Call it like this:\n```json\n{READ}\n```\nand you will see.",
        '{"name": "read_file", "arguments": 42}',
        "[" * 10_000 + "]" * 10_000,
        "",
    ],
    ids=[
        "unknown-name",
        "one-unknown-of-two",
        "prose",
        "json-answer",
        "broken-json",
        "fence-inside-prose",
        "arguments-not-an-object",
        "deep",
        "empty",
    ],
)
async def test_anything_else_stays_prose(content):
    reply = await answer_with(content)
    assert reply.tool_calls == [] and reply.message["content"] == content
    assert reply.finish_reason == "stop"


async def test_recovery_is_off_by_default():
    reply = await answer_with(READ, recover=False)
    assert reply.tool_calls == [] and reply.message["content"] == READ


async def test_real_tool_calls_are_left_as_they_are():
    real = [call("c1", '{"path": "notes.txt"}')]
    real[0]["function"]["name"] = "read_file"
    reply = await answer_with(READ, calls=real)
    assert [c["id"] for c in reply.tool_calls] == ["c1"]
    assert called(reply) == [("read_file", {"path": "notes.txt"})]


async def test_a_run_goes_on_through_recovered_calls(tmp_path):
    from orchestra import Agent, Limits, Runner, Status, catalog

    (tmp_path / "errors.log").write_text("worker 7 timed out\n")

    def handler(request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        content = f"<tool_call>{READ}</tool_call>" if not results else f"It says: {results[0]}"
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 20},
            },
        )

    provider = OpenAIProvider(
        base_url="http://x.test/v1", transport=httpx.MockTransport(handler), recover_tool_calls=True
    )
    agent = Agent(name="a", model="m", tools=catalog(tmp_path), limits=Limits(max_turns=4))
    try:
        result = await Runner(provider=provider).run(agent, "Why did the job fail?")
    finally:
        await provider.aclose()
    assert result.status is Status.COMPLETED
    assert result.answer == "It says: The text of errors.log (19 bytes):\nworker 7 timed out\n"
    assert result.state.own.tool_runs == 1


# -- what a real llama.cpp server does (seen against tools/local_model.py) -----------------------


def past_call(arguments: Any) -> dict[str, Any]:
    function = {"name": "read_file", "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": function}],
    }


@pytest.mark.parametrize(
    ("written", "sent"),
    [
        ('{"path": "errors.log"}', '{"path": "errors.log"}'),
        ("", "{}"),
        ("  ", "{}"),
        ('{"path": "err', json.dumps('{"path": "err')),
        ("errors.log", '"errors.log"'),
    ],
    ids=["json", "empty", "blank", "cut", "not-json"],
)
def test_past_calls_are_sent_with_json_arguments_and_the_transcript_is_kept(written, sent):
    """llama.cpp answers 500 to a request whose past call has arguments that are not JSON."""
    messages = [{"role": "user", "content": "hi"}, past_call(written)]
    payload = ChatRequest(model="m", messages=messages).payload()
    arguments = payload["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert arguments == sent
    json.loads(arguments)
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == written
    assert payload["messages"][0] is messages[0]


async def cut_reply(content: str, *, recover: bool = False) -> Any:
    """The reply made of a body cut at max_tokens, as llama.cpp sends an unfinished call."""
    message = {"role": "assistant", "content": content}
    usage = {"prompt_tokens": 217, "completion_tokens": 8}
    return await reply_of(message, "length", usage, recover)


@pytest.mark.parametrize("recover", [False, True])
@pytest.mark.parametrize(
    ("content", "arguments"),
    [
        ('```json\n{"name": "read_file", "arguments": {"pa', '{"pa'),
        ('```json\n{"name": "list_files"', ""),
        ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.log"}}\n</tool_c', None),
        ('{"name": "read_file", "parameters": {', "{"),
    ],
    ids=["fenced", "name-only", "tagged", "bare"],
)
async def test_a_call_cut_at_max_tokens_written_as_text_is_a_cut_call(content, arguments, recover):
    reply = await cut_reply(content, recover=recover)
    [cut] = reply.tool_calls
    assert reply.finish_reason == "length" and reply.message["content"] is None
    assert cut["id"].startswith("call_") and cut["function"]["name"] in ("read_file", "list_files")
    if arguments is not None:
        assert cut["function"]["arguments"] == arguments


@pytest.mark.parametrize(
    "content",
    [
        "The log says worker 7",
        "```python\nprint('name')",
        '```json\n{"name": "rm_rf", "arguments": {',
        '```json\n{"na',
        'I will call {"name": "read_file"',
    ],
    ids=["prose", "code", "undeclared", "no-name-yet", "prose-first"],
)
async def test_anything_else_cut_at_max_tokens_stays_prose(content):
    reply = await cut_reply(content)
    assert reply.tool_calls == [] and reply.message["content"] == content
    assert reply.finish_reason == "length"


async def test_a_run_through_a_cut_call_on_a_llama_cpp_like_server_never_takes_it_for_an_answer(
    tmp_path,
):
    """Turn 1 is cut while writing a call (content, finish length); the server refuses
    any request whose past calls' arguments are not JSON, as llama.cpp does; the cut
    call is answered as cut, never run, and the run goes on to a real answer."""
    from orchestra import Agent, Limits, Runner, Status, catalog

    (tmp_path / "errors.log").write_text("worker 7 timed out\n")
    seen: list[list[dict[str, Any]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        seen.append(messages)
        for m in messages:
            for c in m.get("tool_calls") or ():
                try:
                    json.loads(c["function"]["arguments"])
                except ValueError:
                    error = {"code": 500, "message": "Failed to parse tool call arguments as JSON"}
                    return httpx.Response(500, json={"error": error})
        cut = len(seen) == 1
        message = {
            "role": "assistant",
            "content": '```json\n{"name": "read_file", "arguments": {"pa',
        }
        if not cut:
            message = {"role": "assistant", "content": "Nothing was read."}
        return httpx.Response(
            200,
            json={
                "choices": [{"message": message, "finish_reason": "length" if cut else "stop"}],
                "usage": {"prompt_tokens": 300, "completion_tokens": 8},
            },
        )

    provider = OpenAIProvider(base_url="http://x.test/v1", transport=httpx.MockTransport(handler))
    agent = Agent(name="a", model="m", tools=catalog(tmp_path), limits=Limits(max_turns=4))
    try:
        result = await Runner(provider=provider).run(agent, "Why did the job fail?")
    finally:
        await provider.aclose()
    assert result.status is Status.COMPLETED and result.answer == "Nothing was read."
    assert (result.state.turns, result.state.own.tool_runs, len(seen)) == (2, 0, 2)
    [answered] = [m for m in result.state.messages if m["role"] == "tool"]
    assert answered["content"].startswith("Error: not run. Your reply was cut at max_tokens")
