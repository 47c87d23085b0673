"""A real MCP server for tests and benchmarks, written with the SDK's server API (`MCPServer`).

It keeps files in a folder and offers the tools an agent's policy is tested
with, plus a few that misbehave on purpose:

    read_file, write_file, delete_file, list_files   files under ROOT (env), created as needed
    whoami                                           the request's `_meta` (who agentd says is asking)
    echo                                             its text back (the benchmark's call)
    big                                              `chars` characters (an oversized result)
    hang                                             never answers (a hung call)
    crash                                            the process exits at once (stdio)
    grow                                             adds a tool `fresh` and says the list changed
    log                                              sends a log message (`notifications/message`)

Run it over stdio: `python -m testkit.fake_mcp` (ROOT from the environment),
or over Streamable HTTP on loopback in the test's own loop with `serve_http`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPDeprecationWarning

from testkit.serving import serve_on_loopback


def _mark_cancelled(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "hang-cancelled").write_text("cancelled", encoding="utf-8")


def build_server(root: Path) -> MCPServer:
    server = MCPServer("fake-files", log_level="WARNING")

    def path_of(name: str) -> Path:
        target = (root / name).resolve()
        if root.resolve() not in target.parents:
            raise ValueError(f"{name!r} is outside the folder")
        return target

    @server.tool()
    def read_file(path: str) -> str:
        """Read a text file."""
        return path_of(path).read_text(encoding="utf-8")

    @server.tool()
    def write_file(path: str, content: str) -> str:
        """Write a text file (created or replaced)."""
        target = path_of(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {path}"

    @server.tool()
    def delete_file(path: str) -> str:
        """Delete a file."""
        path_of(path).unlink()
        return f"deleted {path}"

    @server.tool()
    def list_files() -> str:
        """List the files."""
        return "\n".join(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))

    @server.tool()
    async def whoami(ctx: Context) -> str:
        """Say who the client says is asking."""
        meta = ctx.request_context.meta or {}
        return json.dumps({k: v for k, v in meta.items() if k.startswith("agentd/")}, sort_keys=True)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def big(chars: int) -> str:
        """Return that many characters."""
        return "x" * chars

    @server.tool()
    async def hang() -> str:
        """Never answer. Cancelled by the client (`notifications/cancelled`), it leaves the file
        `hang-cancelled` in the folder: proof the server heard the cancellation and stopped."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            _mark_cancelled(root)
            raise
        return "unreachable"

    @server.tool()
    def crash() -> str:
        """Exit the process at once."""
        os._exit(3)

    @server.tool()
    async def log(level: str, data: dict[str, Any], ctx: Context) -> str:
        """Send a log message to the client."""
        with warnings.catch_warnings():  # deprecated in 2026-07-28, still what servers send
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await ctx.log(cast(Any, level), data, logger_name="fake")
        return "logged"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `fresh` and announce the change."""
        server.add_tool(lambda: "fresh!", name="fresh", description="A tool added while running.")
        await ctx.notify_tools_changed()
        return "added fresh"

    return server


@contextlib.asynccontextmanager
async def serve_http(
    root: Path, port: int = 0, legacy: bool = False, unknown_session: int = 404
) -> AsyncIterator[str]:
    """Serve the fake over Streamable HTTP on 127.0.0.1 in this loop (on `port`, to restart one where
    it was: a new instance knows none of the old one's sessions); yields its URL. `legacy`: as a
    2025-era server, which knows no `server/discover`, so the client's `initialize` opens a session.
    `unknown_session=400`: a session it does not know is a 400 "No valid session ID provided" (as the
    TypeScript SDK's servers answer), not the spec's 404."""
    app: Any = build_server(root).streamable_http_app()
    if legacy:
        app = _without_discover(app)
    if unknown_session == 400:
        app = _unknown_session_as_400(app)
    async with serve_on_loopback(app, lifespan="on", port=port) as base:
        yield f"{base}/mcp"


def _without_discover(app: Any) -> Any:
    """`app`, answering `server/discover` with "method not found" as a 2025-era server does."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        request = json.loads(body or b"null")
        if isinstance(request, dict) and request.get("method") == "server/discover":
            error = {"code": -32601, "message": "Method not found"}
            answer = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            return await send({"type": "http.response.body", "body": answer})
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return cast(dict[str, Any], await receive())
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return wrapped


def _unknown_session_as_400(app: Any) -> Any:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"},
        }
    ).encode()

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        rewritten = False

        async def rewrite(message: dict[str, Any]) -> None:
            nonlocal rewritten
            if message["type"] == "http.response.start" and message["status"] == 404:
                rewritten = True
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                return await send({"type": "http.response.start", "status": 400, "headers": headers})
            if rewritten and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return None
                return await send({"type": "http.response.body", "body": body})
            return await send(message)

        return await app(scope, receive, rewrite)

    return wrapped


def stdio_command() -> list[str]:
    """The command that runs the fake over stdio with this Python."""
    # testkit is not installed: the child finds it at the repository root, whatever its working folder
    repo = str(Path(__file__).resolve().parents[1])
    return [
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, {repo!r}); import testkit.fake_mcp as m; m.main()",
    ]


def main(argv: list[str] | None = None) -> None:
    root = Path(os.environ.get("ROOT", "."))
    root.mkdir(parents=True, exist_ok=True)
    build_server(root).run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
