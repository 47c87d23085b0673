"""Reaching one MCP server with the official SDK: its transport (stdio or Streamable HTTP), watched.

The SDK's client does not say when its server went away between calls (a stdio
server that crashed, an HTTP stream that dropped). `watched` stands between
the transport and the client and sets an event when the server's side of the
connection ends, whatever the transport, so the supervisor can reconnect at
once instead of at the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
from mcp.client import Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentd.config.tools import McpServerSpec

# The MCP SDK's own default: long reads, since a server may hold a response stream open.
SSE_READ_TIMEOUT_S = 300.0


@contextlib.asynccontextmanager
async def transport_of(spec: McpServerSpec, errlog: Any = None) -> AsyncIterator[Any]:
    """The SDK transport streams for `spec` (an HTTP client owned here when it is a URL)."""
    if spec.command is not None:
        params = StdioServerParameters(
            command=spec.command[0],
            args=spec.command[1:],
            # the server sees the SDK's short list of safe variables plus its own env, never our secrets
            env=dict(spec.env),
            cwd=spec.cwd,
        )
        async with stdio_client(params, errlog=errlog or _stderr()) as streams:
            yield streams
        return
    assert spec.url is not None
    timeout = httpx2.Timeout(spec.timeout_s, read=max(SSE_READ_TIMEOUT_S, spec.timeout_s))
    async with (
        httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout) as http,
        streamable_http_client(spec.url, http_client=http) as streams,
    ):
        yield streams


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
