"""Reaching one MCP server with the official SDK: its transport (stdio or Streamable HTTP), watched.

The SDK's client does not say when its server went away between calls (a stdio
server that crashed, an HTTP stream that dropped). `watched` stands between
the transport and the client and sets an event when the server's side of the
connection ends, whatever the transport, so the supervisor can reconnect at
once instead of at the next call.

A Streamable HTTP server that no longer knows the session (it restarted, or
expired it) answers 404 to a request that carries the session's id; the spec
says the client must then start a new session. Some servers say 400 "no valid
session" instead. The SDK surfaces either as a failed request only, so the
HTTP client here watches the responses and reports the session gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO, cast

import anyio
import httpx2
from mcp.client import Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client

from agentd.config.tools import McpServerSpec
from agentd.tools.mcp_stderr import ServerStderr

# The MCP SDK's own default: long reads, since a server may hold a response stream open.
SSE_READ_TIMEOUT_S = 300.0


@contextlib.asynccontextmanager
async def transport_of(
    spec: McpServerSpec,
    stderr: ServerStderr | None = None,
    session_gone: Callable[[], None] | None = None,
) -> AsyncIterator[Any]:
    """The SDK transport streams for `spec` (an HTTP client owned here when it is a URL);
    a stdio server's stderr goes to `stderr` (logged, its tail kept), else to ours;
    `session_gone` is called when an HTTP server says it no longer knows the session."""
    if spec.command is not None:
        params = StdioServerParameters(
            command=spec.command[0],
            args=spec.command[1:],
            # the server sees the SDK's short list of safe variables plus its own env, never our secrets
            env=dict(spec.env),
            cwd=spec.cwd,
        )
        if stderr is None:
            async with stdio_client(params, errlog=_stderr()) as streams:
                yield streams
            return
        async with stderr.capture() as errlog:
            connection = stdio_client(params, errlog=cast(TextIO, errlog))
            async with connection as streams:
                errlog.close()  # the server holds its own copy: the pipe ends when the server does
                process = _process_of(connection)
                try:
                    yield streams
                finally:
                    stderr.process = process
        return
    assert spec.url is not None
    timeout = httpx2.Timeout(spec.timeout_s, read=max(SSE_READ_TIMEOUT_S, spec.timeout_s))
    hooks = {"response": [_session_watch(session_gone)]} if session_gone is not None else {}
    async with (
        httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout, event_hooks=hooks) as http,
        streamable_http_client(spec.url, http_client=http) as streams,
    ):
        yield streams


def _process_of(connection: Any) -> Any:
    """The server process inside the SDK's stdio_client, for its exit status once it ended. The SDK
    does not expose it: it is read from the suspended context manager's frame, and a later SDK that
    keeps it elsewhere only costs the status in the error message (None here)."""
    frame = getattr(getattr(connection, "gen", None), "ag_frame", None)
    process = frame.f_locals.get("process") if frame is not None else None
    return process if hasattr(process, "returncode") else None


def _session_watch(session_gone: Callable[[], None]) -> Callable[[httpx2.Response], Any]:
    async def check(response: httpx2.Response) -> None:
        if MCP_SESSION_ID not in response.request.headers:
            return  # no session asked for: a 404 is the server not knowing the method
        if response.status_code == 404:
            session_gone()
        elif response.status_code == 400:
            await response.aread()  # a short error body; the SDK reads it again from the cache
            if b"session" in response.content.lower():
                session_gone()

    return check


def _stderr() -> Any:
    """Where a stdio server's stderr goes: ours, or the process's own when ours is not a file (a test's
    capture, an embedding application): the subprocess needs a real descriptor."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


@contextlib.asynccontextmanager
async def watched(transport: Transport, lost: asyncio.Event) -> AsyncIterator[Any]:
    """`transport`'s streams, with `lost` set once the server's side ends (EOF or a broken stream)."""
    async with transport as (read, write):
        forward, receive = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            async with forward:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    async for item in read:
                        await forward.send(item)
            lost.set()

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()
                receive.close()
