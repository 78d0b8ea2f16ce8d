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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol
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
from .._redact import redact, register
from .._settings import ModelSettings
from .recover import cut_call, declared_names, recover_tool_calls
from .reply import Body, ChatReply, error_text, fresh_id, parse_reply, reply_of
from .sse import ServerEvent
from .stream import Assembly, Listener, Reading, is_event_stream
from .tokens import declarations

if TYPE_CHECKING:  # imported by the client that uses it: `orchestra show` needs none
    import httpx

__all__ = [
    "ChatReply",
    "ChatRequest",
    "HTTPProvider",
    "OpenAIProvider",
    "Provider",
    "default_base_url",
    "fresh_id",
    "openai_endpoint",
    "provider_name_for",
]

DEFAULT_MAX_CONNECTIONS = 64
"""Requests one :class:`OpenAIProvider` has in flight at once (the others queue)."""


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
    settings: ModelSettings | None = None
    """How the model samples the reply (``max_tokens`` apart: the field above is the
    cap sent); None: the server's defaults."""
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
        if self.settings is not None:
            body.update(self._sampling())
        return body

    def _sampling(self) -> dict[str, Any]:
        """The settings as Chat Completions names them, ``extra_body`` last (it
        cannot name a field set above: see :data:`~orchestra._settings.RESERVED_BODY_FIELDS`)."""
        s = self.settings
        assert s is not None
        fields: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "seed": s.seed,
            "parallel_tool_calls": s.parallel_tool_calls if self.tools else None,
            "stop": list(s.stop) or None,
        }
        return {**{k: v for k, v in fields.items() if v is not None}, **s.extra_body}

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
    if isinstance(provider, HTTPProvider):
        await provider.release_connections()


OPENAI_URL = "https://api.openai.com/v1"
"""Where a provider given an OpenAI key and no endpoint goes (the official client's default)."""


def _env_base_url() -> str | None:
    return os.environ.get("OPENAI_BASE_URL") or os.environ.get("LLM_BASE_URL")


def default_base_url(api_key: str | None = None) -> str | None:
    """The endpoint when none is given: ``$OPENAI_BASE_URL`` (or ``$LLM_BASE_URL``),
    else OpenAI's API if an OpenAI key is given or set (``$OPENAI_API_KEY``);
    None: nowhere to go."""
    key = os.environ.get("OPENAI_API_KEY", "") if api_key is None else api_key
    return _env_base_url() or (OPENAI_URL if key else None)


def openai_endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """The base URL and key of an OpenAI API client: those given, else the
    environment's (see :func:`default_base_url`; ``$OPENAI_API_KEY``). The key
    goes as a bearer token (:func:`bearer`).

    Raises:
        ConfigError: no endpoint given, set, or implied by a key.
    """
    url = base_url or default_base_url(api_key)
    if not url:
        raise ConfigError(
            "no endpoint: pass base_url= (or set OPENAI_BASE_URL), or set OPENAI_API_KEY "
            "for OpenAI's API"
        )
    return url, api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")


def bearer(key: str) -> dict[str, str]:
    """The ``Authorization`` header of an OpenAI API client (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


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


class HTTPProvider:
    """What every provider over HTTP shares, whatever its wire format: the
    connection pools and admission (:class:`~orchestra._model.http.Endpoint`),
    streaming into an :class:`~orchestra._model.stream.Assembly`, and httpx's
    failures mapped to :class:`ProviderError` with no secret in any message.

    A wire format implements :meth:`_feed` (one event of a stream) and
    :meth:`_parsed` (a whole JSON reply); :meth:`_exchange` sends a body to
    its path and returns the :class:`ChatReply`.

    Cancellation: :meth:`_exchange` is a checkpoint; a cancel aborts the HTTP
    request in flight (its connection is closed).
    """

    END_OF_STREAM: ClassVar[str] = "its end"
    """How the wire format's last event is named in errors (a stream cut before it)."""

    def __init__(
        self,
        *,
        base_url: str,
        key: str,
        headers: Mapping[str, str],
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        max_connections: int,
        provider_name: str,
        stream: bool,
    ) -> None:
        register(key)
        self._key = key
        self._answered = False
        self._streams = stream
        self.provider_name = provider_name
        self.base_url = base_url.rstrip("/")
        if not (isinstance(max_connections, int) and max_connections >= 1):
            raise ConfigError(
                f"max_connections must be a whole number >= 1, got {max_connections!r}"
            )
        from .http import Endpoint

        self._endpoint = Endpoint(
            base_url=self.base_url,
            headers=dict(headers),
            timeout=timeout,
            max_connections=max_connections,
            transport=transport,
        )

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Ask the model (see :class:`Provider`): the wire format's request, sent by
        :meth:`_exchange`."""
        raise NotImplementedError

    def _feed(self, assembly: Assembly, event: ServerEvent) -> Reading:
        """One event of a streamed reply into ``assembly``; what to read next.

        Raises:
            ProviderReplyError: an event this wire format does not send.
            ProviderHTTPError: the server said it failed, mid-stream.
        """
        raise NotImplementedError

    def _parsed(self, response: Body) -> ChatReply:
        """The reply in a whole (not streamed) 2xx response.

        Raises:
            ProviderReplyError: a body that is not this wire format's reply.
        """
        raise NotImplementedError

    async def _exchange(
        self, request: ChatRequest, path: str, body: Mapping[str, Any]
    ) -> ChatReply:
        """POST ``body`` to ``path`` (streamed if this provider streams) and read the reply.

        Raises:
            ProviderUnreachable: no connection could be made.
            ProviderHTTPError: another transport failure or a non-2xx status.
            ProviderReplyError: a 2xx body that is not a reply.
            No message holds a secret (see the module docstring).
        """
        import httpx

        assembly = Assembly(
            limit=request.max_tokens, listener=request.listener, sent_at=trio.current_time()
        )
        content = orjson.dumps(body)
        try:
            if self._streams:
                reader = functools.partial(self._fed, assembly)
                response = await self._endpoint.stream(path, content, reader)
            else:
                response = await self._endpoint.post(path, content)
        except httpx.ConnectError as exc:
            raise self._unreachable(exc) from exc
        except httpx.HTTPError as exc:
            raise ProviderHTTPError(
                self._scrub(f"request to {self.base_url} failed: {exc!r}")
            ) from exc
        self._answered = True
        # The status first: an error sent as an event stream is the server's error,
        # its status deciding the retry, not a stream that ended before its end.
        if response.status_code >= 400:
            raise ProviderHTTPError(
                self._scrub(
                    f"{self.base_url} answered {response.status_code}: {error_text(response)}"
                ),
                status_code=response.status_code,
                retry_after=retry_after(response.headers.get("retry-after")),
            )
        if is_event_stream(response.headers):
            return self._streamed(assembly)
        try:
            return self._parsed(response)
        except ProviderReplyError as exc:
            raise ProviderReplyError(self._scrub(str(exc))) from None

    def _fed(self, assembly: Assembly, event: ServerEvent) -> Reading:
        """One event of a streamed reply (see :meth:`_feed`), its first noted, its
        errors scrubbed."""
        self._answered = True
        if assembly.first_at is None:
            assembly.first_at = trio.current_time()
        try:
            return self._feed(assembly, event)
        except ProviderReplyError as exc:
            raise ProviderReplyError(self._scrub(str(exc))) from None
        except ProviderHTTPError as exc:
            raise ProviderHTTPError(self._scrub(str(exc)), status_code=exc.status_code) from None

    def _streamed(self, assembly: Assembly) -> ChatReply:
        """The reply a stream delivered; a stream that ended before its last event
        (and before its cap) failed in transport."""
        if not (assembly.done or assembly.over):
            raise ProviderHTTPError(
                self._scrub(f"{self.base_url} ended the stream before {self.END_OF_STREAM}")
            )
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

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._endpoint.aclose()

    async def release_connections(self) -> None:
        """Close the pooled connections of the trio run that ends (the provider is
        used again from another trio run: ``Runner.run_sync``, ``orchestra.aio``)."""
        await self._endpoint.release()


class OpenAIProvider(HTTPProvider):
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

    END_OF_STREAM: ClassVar[str] = "[DONE]"

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
        if cap_field not in (None, *CAP_FIELDS):
            raise ConfigError(f"cap_field must be one of {CAP_FIELDS}, got {cap_field!r}")
        url, key = openai_endpoint(base_url, api_key)
        super().__init__(
            base_url=url,
            key=key,
            headers=bearer(key),
            timeout=timeout,
            transport=transport,
            max_connections=max_connections,
            provider_name=provider_name or provider_name_for(url),
            stream=stream,
        )
        self._recover = recover_tool_calls
        self._cap_field = cap_field
        self._completion_cap: set[str] = set()
        """Models that refused ``max_tokens`` for ``max_completion_tokens``."""

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
        with that (and from then on). No error's message holds a secret (see the
        module docstring).

        Raises:
            ProviderUnreachable: no connection could be made.
            ProviderHTTPError: another transport failure or a non-2xx status.
            ProviderReplyError: a 2xx body that is not a chat completion.
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
        """POST the request with its cap in field ``cap`` and read the reply (see
        :meth:`HTTPProvider._exchange`), a call written in its content recovered."""
        reply = await self._exchange(request, "/chat/completions", self._body(request, cap))
        return self._recovered(reply, request)

    def _body(self, request: ChatRequest, cap: str) -> dict[str, Any]:
        payload = request.payload(cap)
        if self._streams:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def _feed(self, assembly: Assembly, event: ServerEvent) -> Reading:
        return assembly.take(event)

    def _parsed(self, response: Body) -> ChatReply:
        return parse_reply(response)

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
