"""The chapter's file catalog served over MCP (stdio by default, or streamable HTTP).

A small Model Context Protocol server over one directory, for Orchestra's MCP
tools (``pip install 'orchestra-trees[mcp]'``). Its tools carry the hints Orchestra
turns into policy: ``list_files``, ``read_file`` and ``scan_archive`` are
read-only (dedupable, run concurrently), ``delete_file`` is destructive (a
human approves it), ``append_note`` is a plain write (in doubt if the server
dies during it), ``touch`` an idempotent one (run again after a crash).

    python examples/mcp_files.py DIR                 # stdio: the client starts it
    python examples/mcp_files.py DIR --http 8931     # http://127.0.0.1:8931/mcp
    orchestra mcp list 'python examples/mcp_files.py DIR'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)
DESTROY = ToolAnnotations(read_only_hint=False, destructive_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
IDEMPOTENT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)


def serve(root: Path) -> MCPServer:
    server = MCPServer("files", instructions=f"Files under {root.name}/.")

    def inside(name: str) -> Path:
        target = (root / name).resolve()
        if target.parent != root:
            raise ToolError(f"{name!r} is not a file of the working directory")
        return target

    @server.tool(annotations=READ)
    def list_files() -> str:
        """List the files in the working directory, one name per line."""
        return "\n".join(sorted(p.name for p in root.iterdir() if p.is_file()))

    @server.tool(annotations=READ)
    def read_file(path: str) -> str:
        """Read a text file from the working directory."""
        target = inside(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path}. Call list_files to see what exists.")
        return target.read_text(errors="replace")[:65536]

    @server.tool(annotations=READ)
    async def scan_archive(query: str, seconds: float = 3.0) -> str:
        """Scan the archive for a query (slow: takes ``seconds``)."""
        await anyio.sleep(seconds)
        return f"3000 archived files scanned; 2 mention {query!r}."

    @server.tool(annotations=DESTROY)
    def delete_file(path: str) -> str:
        """Delete a file from the working directory."""
        target = inside(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path}")
        target.unlink()
        return f"Deleted {path}."

    @server.tool(annotations=WRITE)
    async def append_note(text: str, seconds: float = 0.0) -> str:
        """Append a line to notes.txt (after ``seconds``)."""
        await anyio.sleep(seconds)
        with (root / "notes.txt").open("a") as notes:
            notes.write(text + "\n")
        return "Noted."

    @server.tool(annotations=READ)
    def note_written(text: str, seconds: float = 0.0) -> str:
        """Whether append_note already wrote this line (its reconcile check: JSON)."""
        notes = root / "notes.txt"
        lines = notes.read_text().splitlines() if notes.exists() else []
        if text in lines:
            return json.dumps({"outcome": "done", "result": "Noted."})
        return json.dumps({"outcome": "not_done"})

    @server.tool(annotations=IDEMPOTENT)
    def touch(path: str) -> str:
        """Create an empty file if it does not exist."""
        inside(path).touch()
        return f"{path} exists."

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP here")
    args = parser.parse_args()
    server = serve(args.directory.resolve())
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
