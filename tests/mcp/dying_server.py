"""An MCP server whose tools kill it mid-call (for tests of a server that dies)."""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("dying")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def look() -> str:
    """A read during which the server dies."""
    await anyio.sleep(0.1)
    os._exit(1)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def charge_card(amount: int) -> str:
    """A write during which the server dies (did the charge happen?)."""
    await anyio.sleep(0.1)
    os._exit(1)


if __name__ == "__main__":
    server.run("stdio")
