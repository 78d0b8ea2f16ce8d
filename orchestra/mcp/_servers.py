"""Where an MCP server is: a command to start (stdio) or a URL (streamable HTTP)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

import attrs

from .._exceptions import ConfigError

__all__ = ["HttpServer", "StdioServer", "parse_server"]


def _checks(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


@attrs.frozen(kw_only=True)
class StdioServer:
    """A server this process starts and talks to over its stdin and stdout.

    Its stderr goes to ``errlog`` (a file path), else to a temporary file; if
    it fails to start, the last lines it wrote there are said in the error.
    """

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: Path | None = None
    errlog: Path | None = None
    reconcile: Mapping[str, str] = attrs.field(factory=dict, converter=_checks)
    """Write tool → the companion tool of the same server that says whether a call
    of it took effect (see :mod:`orchestra.mcp`)."""

    @property
    def label(self) -> str:
        """How messages name it: its command line."""
        return shlex.join([self.command, *self.args])


@attrs.frozen(kw_only=True)
class HttpServer:
    """A server already listening for streamable HTTP (``http://host:port/mcp``)."""

    url: str
    reconcile: Mapping[str, str] = attrs.field(factory=dict, converter=_checks)
    """As :attr:`StdioServer.reconcile`."""

    @property
    def label(self) -> str:
        return self.url


def parse_server(text: str) -> StdioServer | HttpServer:
    """A server from one command-line value: a URL, or a command with its arguments.

    Raises:
        ConfigError: empty, or quotes that do not close.
    """
    text = text.strip()
    if text.startswith(("http://", "https://")):
        return HttpServer(url=text)
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"MCP server command {text!r}: {exc}") from None
    if not words:
        raise ConfigError("an MCP server command must not be empty")
    return StdioServer(command=words[0], args=tuple(words[1:]))
