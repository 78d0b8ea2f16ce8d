"""The model interface and its OpenAI-compatible HTTP client.

A provider turns a :class:`ChatRequest` into a :class:`ChatReply`; that is the
whole interface, so a local model, a fake or a recorded replay fits behind it.
``OpenAIProvider`` speaks ``POST {base_url}/chat/completions`` over httpx and
maps every httpx and JSON failure to :class:`ProviderError` here, at the
boundary.

Cancellation: :meth:`Provider.complete` is a checkpoint. Cancelling it aborts
the HTTP request in flight (the connection is closed); nothing is returned and
nothing is charged for a reply that never arrived.

A reply is data from outside: :func:`parse_reply` refuses one whose usage is
not a plausible token count, or that is nested too deeply to decode, with
:class:`ProviderReplyError` rather than letting it reach the books.

Secrets: no error this module raises holds the API key, an ``Authorization``
value or a key-shaped string, even when the server echoed one back (see
:mod:`orchestra._redact`); the key is also registered for redaction
everywhere the process writes.
"""

from __future__ import annotations

import email.utils
import functools
import json
import os
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import attrs
import orjson
import trio

from .._exceptions import (
    ConfigError,
    ProviderHTTPError,
    ProviderReplyError,
    ProviderUnreachable,
)
from .._redact import excerpt, redact, register
from .._storable import loads
from .recover import cut_call, declared_names, recover_tool_calls
from .sse import ServerEvent
from .stream import Assembly, Listener, Reading, is_event_stream
from .tokens import declarations

if TYPE_CHECKING:  # imported by the client that uses it: `orchestra show` needs none
    import httpx

__all__ = [
    "ChatReply",
    "ChatRequest",
    "OpenAIProvider",
    "Provider",
    "fresh_id",
    "provider_name_for",
]

DEFAULT_MAX_CONNECTIONS = 64
"""Requests one :class:`OpenAIProvider` has in flight at once (the others queue)."""

MAX_REPLY_TOKENS = 10_000_000
"""The most prompt or completion tokens one reply may report."""


@attrs.frozen(kw_only=True)
class ChatRequest:
    """One chat-completions request."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] = ()
    max_tokens: int | None = None
    tool_choice: str | None = None
    """``"required"``, ``"auto"`` or ``"none"`` (sent only with tools); None: not sent."""
    response_format: Mapping[str, Any] | None = None
    """The answer's required shape (``{"type": "json_schema", ...}``); None: not sent."""
    listener: Listener | None = attrs.field(default=None, eq=False, repr=False)
    """Told each piece of a streamed reply as it arrives (see :mod:`.stream`)."""

    def payload(self, cap: str = "max_tokens") -> dict[str, Any]:
        """The JSON body of the request (past calls' arguments as JSON: see
        :func:`sendable`); ``cap`` names the field that carries ``max_tokens``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [sendable(m) for m in self.messages],
        }
        if self.tools:
            body["tools"] = list(self.tools)
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
        if self.max_tokens is not None:
            body[cap] = self.max_tokens
        if self.response_format is not None:
            body["response_format"] = dict(self.response_format)
        return body

    def declarations(self) -> list[Mapping[str, Any]]:
        """What the prompt declares besides its messages, as counted: the tools,
        and the response format (a schema the server adds to the prompt)."""
        return declarations(self.tools, self.response_format)


def sendable(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` with every tool call's arguments valid JSON, as servers require.

    llama.cpp parses the arguments of every past call to render its chat
    template and answers HTTP 500 to the whole request if one is not JSON
    (a call cut at ``max_tokens``, empty arguments, a recovered call whose
    arguments were a string), on every retry and every resume. Such
    arguments are sent as a JSON string of what the model wrote (empty ones
    as ``{}``); the transcript keeps them as they were.
    """
    calls = message.get("tool_calls")
    if not calls or all(_unparseable(c) is None for c in calls):
        return message
    return {**message, "tool_calls": [_sendable_call(c) for c in calls]}


def _sendable_call(call: Mapping[str, Any]) -> Mapping[str, Any]:
    text = _unparseable(call)
    if text is None:
        return call
    arguments = json.dumps(text) if text.strip() else "{}"
    return {**call, "function": {**call["function"], "arguments": arguments}}


def _unparseable(call: Mapping[str, Any]) -> str | None:
    """The call's arguments if they are text that is not JSON, else None."""
    function = call.get("function")
    text = function.get("arguments") if isinstance(function, Mapping) else None
    if not isinstance(text, str) or _is_json(text):
        return None
    return text


@functools.lru_cache(maxsize=4096)
def _is_json(text: str) -> bool:
    """Whether ``text`` parses as JSON (a past call's arguments: asked again every turn)."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


@attrs.frozen(kw_only=True)
class ChatReply:
    """The assistant message of a reply, why it ended, and what it cost in tokens."""

    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool = True
    """False when the server sent no usage: the counts are 0 and the caller estimates."""
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those read from the provider's cache
    (``usage.prompt_tokens_details.cached_tokens``)."""
    reasoning_tokens: int = 0
    """Of ``completion_tokens``, those spent reasoning
    (``usage.completion_tokens_details.reasoning_tokens``)."""
    streamed: bool = False
    """Whether the reply came as a stream of events."""
    time_to_first_chunk_s: float | None = None
    """For a streamed reply: seconds from sending the request to its first event."""
    model: str | None = None
    """The model that answered, as the server names it (``model`` of the body), if given."""
    id: str | None = None
    """The server's id of this completion (``id`` of the body), if given."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the model asked for (possibly none)."""
        return list(self.message.get("tool_calls") or [])


class Provider(Protocol):
    """Anything that can answer a chat request."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Ask the model. Raises :class:`ProviderError` on failure; a checkpoint."""
        ...


def endpoint_of(provider: object) -> str | None:
    """The base URL of ``provider``, if it has one (an endpoint over HTTP).

    What a provider says of itself is asked here, in the provider package, and
    nowhere else (a provider is any object with ``complete``)."""
    url = getattr(provider, "base_url", None)
    return url if isinstance(url, str) else None


def name_of(provider: object) -> str | None:
    """The vendor's name for ``provider`` in traces (``gen_ai.provider.name``), if it says."""
    name = getattr(provider, "provider_name", None)
    return name if isinstance(name, str) else None


async def release(provider: object) -> None:
    """Close the connections ``provider`` pooled in the trio run that ends, if it pools any."""
    if isinstance(provider, OpenAIProvider):
        await provider.release_connections()


def _env_base_url() -> str | None:
    return os.environ.get("OPENAI_BASE_URL") or os.environ.get("LLM_BASE_URL")


_KNOWN_HOSTS = {  # host suffix -> gen_ai.provider.name (the conventions' well-known values)
    "api.openai.com": "openai",
    "openai.azure.com": "azure.ai.openai",
    "api.anthropic.com": "anthropic",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "api.moonshot.ai": "moonshot_ai",
    "api.cohere.com": "cohere",
    "api.cohere.ai": "cohere",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "aiplatform.googleapis.com": "gcp.vertex_ai",
}


def provider_name_for(base_url: str) -> str:
    """``gen_ai.provider.name`` for an endpoint: the vendor's well-known name for
    its API host (``api.openai.com`` -> ``openai``), else the host itself
    (``127.0.0.1``, ``openrouter.ai``): an OpenAI-compatible server says
    nothing reliable about whose model is behind it."""
    host = (urlsplit(base_url).hostname or "").lower()
    for suffix, name in _KNOWN_HOSTS.items():
        if host == suffix or host.endswith("." + suffix):
            return name
    return host or "unknown"


class OpenAIProvider:
    """A client for any OpenAI-compatible chat-completions endpoint.

    ``base_url`` and ``api_key`` default to ``OPENAI_BASE_URL`` (or
    ``LLM_BASE_URL``) and ``OPENAI_API_KEY``. ``transport`` lets tests plug in
    an in-process transport such as ``orchestra.testing.ScriptedTransport``.

    ``provider_name`` names the vendor behind the endpoint in traces
    (``gen_ai.provider.name``); by default :func:`provider_name_for` the base URL.

    ``recover_tool_calls=True`` reads tool calls a model wrote into its
    content as JSON (bare, fenced or in ``<tool_call>`` tags) back into
    ``tool_calls`` when they name a declared tool (see :mod:`orchestra._model.recover`).
    Always, a reply cut at ``max_tokens`` while writing such a call (which
    llama.cpp returns as content) is read as that one cut call, so the loop
    answers it as cut rather than take the fragment for the answer.

    Concurrency: at most ``max_connections`` requests are in flight at once;
    the others wait their turn, first come first served (see
    :mod:`orchestra._model.http`: admission in front of small connection pools, so
    10,000 runs sharing one provider queue at no cost per waiter). Time spent
    waiting for a turn does not count against ``timeout`` (the run's deadline
    still bounds it); a cancelled call just leaves the queue.

    Deadlines: ``timeout`` bounds each request whole once it has its turn, its
    reply's last byte included, however the server trickles it (see
    :mod:`orchestra._model.http`); a streamed reply ends at its ``[DONE]``, or
    at its cap (``max_tokens``, by our count), and its stream is closed there.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
        recover_tool_calls: bool = False,
        provider_name: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        cap_field: str | None = None,
        stream: bool = True,
    ) -> None:
        url = base_url or _env_base_url()
        if not url:
            raise ConfigError("no base URL: pass base_url= or set OPENAI_BASE_URL")
        self.provider_name = provider_name or provider_name_for(url)
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        register(key)
        self._key = key
        self._recover = recover_tool_calls
        self._answered = False
        if cap_field not in (None, *CAP_FIELDS):
            raise ConfigError(f"cap_field must be one of {CAP_FIELDS}, got {cap_field!r}")
        self._cap_field = cap_field
        self._completion_cap: set[str] = set()
        self._streams = stream
        """Models that refused ``max_tokens`` for ``max_completion_tokens``."""
        self.base_url = url.rstrip("/")
        if not (isinstance(max_connections, int) and max_connections >= 1):
            raise ConfigError(
                f"max_connections must be a whole number >= 1, got {max_connections!r}"
            )
        from .http import Endpoint

        self._endpoint = Endpoint(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            max_connections=max_connections,
            transport=transport,
        )

    def cap_field(self, model: str) -> str:
        """The request field that caps ``model``'s reply: ``max_completion_tokens`` for
        OpenAI's API (where ``max_tokens`` is deprecated, and refused by reasoning
        models) and for a model that refused ``max_tokens``; else ``max_tokens``."""
        if self._cap_field is not None:
            return self._cap_field
        completion = self.provider_name in _COMPLETION_CAP or model in self._completion_cap
        return "max_completion_tokens" if completion else "max_tokens"

    async def complete(self, request: ChatRequest) -> ChatReply:
        """POST the request and parse the reply (see :class:`Provider`); a model that
        refuses ``max_tokens`` for ``max_completion_tokens`` is asked again at once
        with that (and from then on).

        Raises:
            ProviderUnreachable: no connection could be made.
            ProviderHTTPError: another transport failure or a non-2xx status.
            ProviderReplyError: a 2xx body that is not a chat completion.
            No message holds a secret (see the module docstring).
        """
        cap = self.cap_field(request.model)
        try:
            return await self._complete(request, cap)
        except ProviderHTTPError as exc:
            if cap != "max_tokens" or not _wants_completion_cap(exc):
                raise
        self._completion_cap.add(request.model)
        return await self._complete(request, "max_completion_tokens")

    async def _complete(self, request: ChatRequest, cap: str) -> ChatReply:
        """POST the request with its cap in field ``cap`` and parse the reply.

        Raises:
            ProviderUnreachable: no connection could be made.
            ProviderHTTPError: another transport failure or a non-2xx status.
            ProviderReplyError: a 2xx body that is not a chat completion.
            No message holds a secret (see the module docstring).
        """
        import httpx

        assembly = Assembly(
            limit=request.max_tokens, listener=request.listener, sent_at=trio.current_time()
        )
        try:
            if self._streams:
                response = await self._endpoint.stream(
                    "/chat/completions",
                    self._body(request, cap),
                    functools.partial(self._fed, assembly),
                )
            else:
                response = await self._endpoint.post("/chat/completions", self._body(request, cap))
        except httpx.ConnectError as exc:
            raise self._unreachable(exc) from exc
        except httpx.HTTPError as exc:
            raise ProviderHTTPError(
                self._scrub(f"request to {self.base_url} failed: {exc!r}")
            ) from exc
        self._answered = True
        # The status first: an error sent as an event stream is the server's error,
        # its status deciding the retry, not a stream that ended before [DONE].
        if response.status_code >= 400:
            raise ProviderHTTPError(
                self._scrub(
                    f"{self.base_url} answered {response.status_code}: {_error_text(response)}"
                ),
                status_code=response.status_code,
                retry_after=retry_after(response.headers.get("retry-after")),
            )
        if is_event_stream(response.headers):
            return self._recovered(self._streamed(assembly), request)
        try:
            reply = parse_reply(response)
        except ProviderReplyError as exc:
            raise ProviderReplyError(self._scrub(str(exc))) from None
        return self._recovered(reply, request)

    def _body(self, request: ChatRequest, cap: str) -> bytes:
        payload = request.payload(cap)
        if self._streams:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return orjson.dumps(payload)

    def _fed(self, assembly: Assembly, event: ServerEvent) -> Reading:
        """One event of a streamed reply; what to do next (read on, whole, cut).

        Raises:
            ProviderReplyError: a message that is not a chat-completion chunk.
            ProviderHTTPError: the server said it failed, mid-stream.
        """
        self._answered = True
        if assembly.first_at is None:
            assembly.first_at = trio.current_time()
        try:
            return assembly.take(event)
        except ProviderReplyError as exc:
            raise ProviderReplyError(self._scrub(str(exc))) from None
        except ProviderHTTPError as exc:
            raise ProviderHTTPError(self._scrub(str(exc)), status_code=exc.status_code) from None

    def _streamed(self, assembly: Assembly) -> ChatReply:
        """The reply a stream delivered; a stream that ended before ``[DONE]`` (and
        before its cap) failed in transport."""
        if not (assembly.done or assembly.over):
            raise ProviderHTTPError(self._scrub(f"{self.base_url} ended the stream before [DONE]"))
        body = assembly.body()
        try:
            reply = reply_of(body)
        except ProviderReplyError as exc:
            raise ProviderReplyError(self._scrub(str(exc))) from None
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ProviderReplyError(self._scrub(f"not a chat completion ({exc!r})")) from exc
        first = assembly.first_at - assembly.sent_at if assembly.first_at is not None else None
        return attrs.evolve(reply, streamed=True, time_to_first_chunk_s=first)

    def _unreachable(self, exc: Exception) -> ProviderUnreachable:
        """The error for a connection that could not be made, in words."""
        why = _connect_failure(exc)
        if self._answered:
            return ProviderUnreachable(
                self._scrub(f"cannot connect to {self.base_url}: {why}"), never_answered=False
            )
        return ProviderUnreachable(
            self._scrub(
                f"cannot connect to {self.base_url}: {why} (nothing has answered there: "
                "is the URL right and the server started?)"
            ),
            never_answered=True,
        )

    def _scrub(self, text: str) -> str:
        """``text`` without this provider's key or anything shaped like a credential."""
        return redact(text, self._key)

    def _recovered(self, reply: ChatReply, request: ChatRequest) -> ChatReply:
        """``reply`` with a cut call written in its content read as a call; with every
        call written in its content read as calls, when recovery is on."""
        if reply.tool_calls:
            return reply
        names = declared_names(request.tools)
        if reply.finish_reason == "length":
            cut = cut_call(reply.message, names)
            return reply if cut is None else attrs.evolve(reply, message=cut)
        message = recover_tool_calls(reply.message, names) if self._recover else None
        if message is None:
            return reply
        return attrs.evolve(reply, message=message, finish_reason="tool_calls")

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._endpoint.aclose()

    async def release_connections(self) -> None:
        """Close the pooled connections of the trio run that ends (the provider is
        used again from another trio run: ``Runner.run_sync``, ``orchestra.aio``)."""
        await self._endpoint.release()


MAX_RETRY_AFTER = 24 * 3600.0
"""A ``Retry-After`` longer than this (seconds) is read as this."""


CAP_FIELDS = ("max_tokens", "max_completion_tokens")
_COMPLETION_CAP = frozenset({"openai", "azure.ai.openai"})
"""Providers whose API takes ``max_completion_tokens`` for every model."""


def _wants_completion_cap(exc: ProviderHTTPError) -> bool:
    """Whether ``exc`` is a 400 refusing ``max_tokens`` and naming ``max_completion_tokens``."""
    text = str(exc)
    return exc.status_code == 400 and "max_tokens" in text and "max_completion_tokens" in text


def _connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in the OS's words (``Connection refused``), found
    down the chain of causes and groups that httpx, httpcore and trio wrap it in."""
    seen: list[BaseException] = [exc]
    visited: set[int] = set()
    while seen:
        found = seen.pop(0)
        if id(found) in visited:
            continue
        visited.add(id(found))
        if isinstance(found, OSError) and found.strerror:
            return found.strerror.rpartition(": ")[2]  # trio: "Error connecting to (…): …"
        if isinstance(found, BaseExceptionGroup):
            seen.extend(found.exceptions)
        seen.extend(e for e in (found.__cause__, found.__context__) if e is not None)
    return re.sub(r"^\[Errno -?\d+\] ", "", str(exc))


def retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    None when absent or unreadable; never negative, at most ``MAX_RETRY_AFTER``.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text) if text.isdigit() else _until(text, now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _until(http_date: str, now: datetime | None) -> float:
    when = email.utils.parsedate_to_datetime(http_date)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - (now or datetime.now(UTC))).total_seconds()


class Body(Protocol):
    """A response's body, read (an :class:`~.http.HTTPReply`, an ``httpx.Response``)."""

    @property
    def content(self) -> bytes: ...

    @property
    def text(self) -> str: ...


def _error_text(response: Body) -> str:
    try:
        return str(_decoded(response.content)["error"]["message"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return excerpt(response.text, 300)


def parse_reply(response: Body) -> ChatReply:
    """A chat-completions response body as a :class:`ChatReply`.

    Raises:
        ProviderReplyError: the body is not a chat completion, or its usage is
            not a whole number of tokens between 0 and ``MAX_REPLY_TOKENS``
            (a reply with no ``usage`` at all is accepted, ``usage_reported=False``).
    """
    try:
        return reply_of(_decoded(response.content))
    except RecursionError:
        raise ProviderReplyError("not a chat completion: the reply is nested too deeply") from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ProviderReplyError(
            f"not a chat completion ({exc!r}): {excerpt(response.text, 300)}"
        ) from exc


def reply_of(body: Any) -> ChatReply:
    """A decoded chat-completions body as a :class:`ChatReply`.

    Raises:
        ProviderReplyError: its usage is implausible (see :func:`parse_reply`).
        KeyError, IndexError, TypeError, ValueError: it is not a chat completion.
    """
    choice = body["choices"][0]
    usage = body.get("usage")
    prompt = _token_count(usage, "prompt_tokens")
    completion = _token_count(usage, "completion_tokens")
    return ChatReply(
        message=_clean_message(choice["message"]),
        finish_reason=str(choice.get("finish_reason") or "stop"),
        prompt_tokens=prompt,
        completion_tokens=completion,
        usage_reported=usage is not None,
        cached_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens", prompt),
        reasoning_tokens=_detail(
            usage, "completion_tokens_details", "reasoning_tokens", completion
        ),
        model=_label(body.get("model")),
        id=_label(body.get("id")),
    )


def _decoded(content: bytes) -> Any:
    """JSON ``content``; :class:`RecursionError` when nested deeper than orjson reads.

    A body whose strings hold a lone surrogate escape (``"\\ud83d"``: half of
    a UTF-16 pair, which orjson refuses) is decoded by ``json`` instead, each
    lone surrogate made U+FFFD (see :mod:`orchestra._storable`).
    """
    try:
        return loads(content)
    except ValueError as exc:
        if "depth limit" in str(exc) or "nested too deeply" in str(exc):
            raise RecursionError(str(exc)) from None
        raise


def _token_count(usage: Mapping[str, Any] | None, field: str) -> int:
    """``usage[field]``, which must be an integer from 0 to ``MAX_REPLY_TOKENS``.

    0 when the reply has no usage at all (some servers omit it): the loop
    then estimates the call's cost from its reservation.
    """
    if usage is None:
        return 0
    value = usage[field]
    if type(value) is not int or not 0 <= value <= MAX_REPLY_TOKENS:
        raise ProviderReplyError(
            f"implausible usage.{field} in the reply: {_short_repr(value)} (expected an "
            f"integer from 0 to {MAX_REPLY_TOKENS:,})"
        )
    return value


def _detail(usage: Mapping[str, Any] | None, details: str, field: str, total: int) -> int:
    """``usage[details][field]``, a part of ``total``; 0 when not reported.

    Servers that do not cache or reason send ``null`` or leave it out; a count
    that is not a whole number within ``total`` is refused like any usage.
    """
    found = usage.get(details) if usage is not None else None
    value = found.get(field) if isinstance(found, Mapping) else None
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= total:
        raise ProviderReplyError(
            f"implausible usage.{details}.{field} in the reply: {_short_repr(value)} (expected "
            f"an integer from 0 to {total:,}, its total)"
        )
    return value


def _label(value: Any) -> str | None:
    """A short identifying string of the reply (its ``model``, its ``id``), else None:
    these only label traces, so an odd one is dropped rather than refused."""
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL:
        return None
    return redact(value)


MAX_LABEL = 256
"""The longest ``model`` or ``id`` of a reply that is kept."""


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _clean_message(message: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        raise TypeError("message is not an object")
    clean: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls")
    if calls:
        clean["tool_calls"] = _unique_ids([_clean_call(c) for c in calls])
    return clean


def _unique_ids(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every call of one message its own id (a missing or repeated id would
    leave a call without a result in the transcript)."""
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if not call["id"] or call["id"] in seen:
            call["id"] = fresh_id(f"{call['id'] or 'call'}_{i}", seen)
        seen.add(call["id"])
    return calls


def fresh_id(wanted: str, seen: Collection[Any]) -> str:
    """``wanted``, or ``wanted`` with a ``_N`` suffix if ``seen`` already has it."""
    candidate, n = wanted, 1
    while candidate in seen:
        candidate, n = f"{wanted}_{n}", n + 1
    return candidate


def _clean_call(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call["function"]
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": str(fn["name"]), "arguments": _arguments_text(fn.get("arguments"))},
    }


def _arguments_text(arguments: Any) -> str:
    """The arguments as a JSON string (some endpoints send an object, not a string)."""
    if not arguments:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
