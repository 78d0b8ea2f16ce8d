"""Parsing chat-completions replies: hostile or broken bodies are ProviderErrors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from orchestra import OpenAIProvider, ProviderHTTPError, ProviderReplyError
from orchestra._provider import ChatRequest, parse_reply

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

    from orchestra._provider import retry_after

    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
    assert retry_after(header, now=now) == seconds
