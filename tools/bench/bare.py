"""The baseline: a bare trio + httpx agent loop, about thirty lines, no Orchestra.

One shared :class:`httpx.AsyncClient`; each run POSTs the transcript to
``/chat/completions``, runs the tool calls of the reply against the sandbox
(``list_files`` and ``read_file``, as the demo's catalog does), appends the
results and asks again, until the reply is prose. No budget, no store, no
events, no retries: what any agent loop must do at the least.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

INSTRUCTIONS = (
    "You are an operations assistant. Use the tools to inspect the working directory "
    "and answer the user's question in one sentence."
)
TASK = "Why did the nightly job fail?"
MAX_TOKENS = 1024


def run_tool(sandbox: Path, function: dict[str, Any]) -> str:
    """The result of one tool call, as the catalog's list_files/read_file give it."""
    if function["name"] == "list_files":
        return "\n".join(sorted(p.name for p in sandbox.iterdir() if p.is_file()))
    path = json.loads(function["arguments"])["path"]
    return (sandbox / path).read_text(encoding="utf-8")


async def bare_streamed(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message of one streamed reply, read with httpx-sse: content
    joined, tool calls assembled by index, the stream read to its end."""
    from httpx_sse import EventSource

    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        async for event in EventSource(response).aiter_sse():
            if event.data == "[DONE]":
                continue
            for choice in json.loads(event.data)["choices"]:
                delta = choice["delta"]
                content.append(delta.get("content") or "")
                for piece in delta.get("tool_calls") or ():
                    call = calls.setdefault(
                        piece["index"],
                        {"type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    call["id"] = piece.get("id") or call.get("id")
                    function = piece.get("function") or {}
                    call["function"]["name"] += function.get("name") or ""
                    call["function"]["arguments"] += function.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


async def bare_run(
    client: httpx.AsyncClient,
    tools: list[dict[str, Any]],
    sandbox: Path,
    model: str = "plan",
    *,
    stream: bool = False,
) -> int:
    """One run to its answer (streamed replies with ``stream``); the number of
    model calls it made."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": TASK},
    ]
    turns = 0
    while True:
        body = {"model": model, "messages": messages, "tools": tools, "max_tokens": MAX_TOKENS}
        if stream:
            message = await bare_streamed(client, body)
        else:
            response = await client.post("/chat/completions", json=body)
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
        messages.append(message)
        turns += 1
        if not message.get("tool_calls"):
            return turns
        for call in message["tool_calls"]:
            result = run_tool(sandbox, call["function"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
