"""Connections to MCP servers, and their tools bound to them.

Cancellation: :func:`open_tools` is an async context manager; its connections
(and the server processes it started) close when the block exits, cancelled
or not. Each tool call is a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TextIO

import anyio
import trio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED

from .._exceptions import ConfigError, ToolError, ToolOutcomeUnknown
from .._redact import redact
from .._tools import Tool
from ._convert import flags, reconciled, result_text, tool_name
from ._servers import HttpServer, StdioServer

__all__ = ["CONNECT_TIMEOUT_S", "open_tools"]

CONNECT_TIMEOUT_S = 30.0
"""How long a server may take to start and answer ``initialize`` and ``tools/list``."""

STDERR_TAIL = 2000
"""Bytes of a failed server's stderr read back (its last lines are said)."""
STDERR_LINES = 5

_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)
"""What a call raises when the connection to its server is gone."""


@contextlib.asynccontextmanager
async def open_tools(
    *servers: StdioServer | HttpServer, connect_timeout_s: float = CONNECT_TIMEOUT_S
) -> AsyncIterator[tuple[Tool, ...]]:
    """Connect to ``servers``; their tools as Orchestra tools, valid inside the block.

    Raises:
        ConfigError: a server cannot be started or reached, does not answer in
            ``connect_timeout_s``, or offers a tool that cannot be declared to a
            model (a bad name or schema, or a name another server uses too).
    """
    async with contextlib.AsyncExitStack() as stack:
        tools: list[Tool] = []
        for server in servers:
            session = await stack.enter_async_context(_session(server, connect_timeout_s))
            tools.extend(await _tools_of(session, server, connect_timeout_s))
        _check_unique(tools)
        yield tuple(tools)


@contextlib.asynccontextmanager
async def _session(
    server: StdioServer | HttpServer, timeout_s: float
) -> AsyncIterator[ClientSession]:
    connected = False
    with _stderr_of(server) as log:
        try:
            async with (
                _streams(server, log) as (read, write),
                ClientSession(read, write) as session,
            ):
                with trio.fail_after(timeout_s):
                    await session.initialize()
                connected = True
                yield session
        except Exception as exc:  # whatever a transport raises before the session is up
            if connected:
                raise
            said = _last_said(log)
            raise ConfigError(
                f"MCP server {server.label}: cannot connect: {_why(exc)}{said}"
            ) from exc


@contextlib.contextmanager
def _stderr_of(server: StdioServer | HttpServer) -> Iterator[TextIO | None]:
    """Where a started server's stderr goes: its ``errlog``, else a temporary file
    (read back if it fails to start); None for a server over HTTP."""
    if isinstance(server, HttpServer):
        yield None
    elif server.errlog is not None:
        with open(server.errlog, "a+", encoding="utf-8") as log:
            yield log
    else:
        with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
            yield log


def _last_said(log: TextIO | None) -> str:
    """`` (it said: …)``: the last lines a server wrote on stderr, redacted; or nothing."""
    if log is None:
        return ""
    log.flush()
    end = log.seek(0, os.SEEK_END)
    log.seek(max(0, end - STDERR_TAIL))
    lines = [line.strip() for line in log.read().splitlines() if line.strip()]
    if not lines:
        return ""
    return f" (it said: {redact(' | '.join(lines[-STDERR_LINES:]))})"


@contextlib.asynccontextmanager
async def _streams(
    server: StdioServer | HttpServer, log: TextIO | None
) -> AsyncIterator[tuple[Any, Any]]:
    if isinstance(server, HttpServer):
        async with streamable_http_client(server.url) as (read, write):
            yield read, write
        return
    params = StdioServerParameters(
        command=server.command, args=list(server.args), env=server.env, cwd=server.cwd
    )
    async with stdio_client(params, errlog=log or sys.stderr) as (read, write):
        yield read, write


async def _tools_of(
    session: ClientSession, server: StdioServer | HttpServer, timeout_s: float
) -> list[Tool]:
    try:
        with trio.fail_after(timeout_s):
            listed = await session.list_tools()
    except (MCPError, *_LOST, trio.TooSlowError) as exc:
        raise ConfigError(f"MCP server {server.label}: cannot list tools: {_why(exc)}") from exc
    tools = [_tool(session, server, spec) for spec in listed.tools]
    return reconciled(tools, server)


def _tool(session: ClientSession, server: StdioServer | HttpServer, spec: Any) -> Tool:
    name = tool_name(spec.name, server.label)
    description = (spec.description or "").strip() or f"{name} (from MCP server {server.label})"
    try:
        return Tool(
            name=name,
            description=description,
            parameters=dict(spec.input_schema or {"type": "object"}),
            function=_caller(session, name, server.label),
            **flags(spec.annotations),
        )
    except ConfigError as exc:
        raise ConfigError(f"MCP server {server.label}: {exc}") from None


def _caller(session: ClientSession, name: str, label: str) -> Callable[..., Awaitable[str]]:
    async def call(**arguments: Any) -> str:
        try:
            result = await session.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise _lost(label, name, exc) from exc
            raise ToolError(f"MCP server {label} refused {name}: {exc.message}") from exc
        except _LOST as exc:
            raise _lost(label, name, exc) from exc
        if not hasattr(result, "content"):  # e.g. a request for user input
            raise ToolError(
                f"{name} asked for input Orchestra cannot give ({type(result).__name__})"
            )
        return result_text(result)

    call.__name__ = name
    return call


def _lost(label: str, name: str, exc: BaseException) -> ToolOutcomeUnknown:
    return ToolOutcomeUnknown(f"MCP server {label} stopped answering during {name}: {_why(exc)}")


def _why(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):  # a transport's task group: its first error
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def _check_unique(tools: list[Tool]) -> None:
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ConfigError(f"two MCP servers offer a tool named {tool.name!r}; connect one")
        seen.add(tool.name)
