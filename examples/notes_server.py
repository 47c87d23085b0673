"""An MCP server to try agentd's tools with: notes kept as text files in NOTES_DIR.

Written with the official MCP SDK's server API. agentd starts it over stdio
(see examples/agents/notes.yaml); run it by hand with
`python examples/notes_server.py` (stdio) or `python examples/notes_server.py http 9000`
(Streamable HTTP on 127.0.0.1:9000/mcp, for `url: http://127.0.0.1:9000/mcp`).
Each tool reads who is asking from the request's `_meta` (agentd sends the
speaker's user id and the conversation key), and signs what it writes.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations

NOTES = Path(os.environ.get("NOTES_DIR", "notes")).resolve()
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
server = MCPServer("notes", log_level="WARNING")


def note_path(name: str) -> Path:
    if not NAME_RE.match(name):
        raise ValueError("a note's name is 1-64 letters, digits, '_' or '-'")
    return NOTES / f"{name}.txt"


def asker(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    return str(meta.get("agentd/user_id") or "someone")


# the spec's hints, which `agentd tools` shows (a destructive tool is asked for unless allowed by name)
READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)


@server.tool(annotations=READ_ONLY)
def list_notes() -> str:
    """List the names of the notes."""
    names = sorted(p.stem for p in NOTES.glob("*.txt"))
    return "\n".join(names) if names else "(no notes yet)"


@server.tool(annotations=READ_ONLY)
def read_note(name: str) -> str:
    """Read one note."""
    return note_path(name).read_text(encoding="utf-8")


@server.tool(annotations=DESTRUCTIVE)
def write_note(name: str, text: str, ctx: Context) -> str:
    """Write a note (created, or replaced)."""
    NOTES.mkdir(parents=True, exist_ok=True)
    note_path(name).write_text(f"{text}\n-- {asker(ctx)}\n", encoding="utf-8")
    return f"saved note {name}"


@server.tool(annotations=DESTRUCTIVE)
def delete_note(name: str) -> str:
    """Delete a note."""
    note_path(name).unlink()
    return f"deleted note {name}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", port=int(sys.argv[2]) if len(sys.argv) > 2 else 9000)
    else:
        server.run()
