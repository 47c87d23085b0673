"""One request to an MCP server (a tool call, a resource read) under the server's limits.

Every request has limits: a cap on requests in flight at once
(`max_concurrent_calls`; waiting for a slot counts toward the time), a silence
allowed (`timeout_s`: each progress notification the server sends for the
request — it carries a progressToken — starts it again), and a whole
(`max_s`, never passed however often the server says it progresses). A server
that forgot the session (it restarted) never ran the request: it is made again
on the new session, within the same limits. A server that is down, slow or
broken is a ToolError the model reads; the turn goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import mcp_types as types
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from agentd.config.tools import McpServerSpec
from agentd.errors import ToolError
from agentd.tools.mcp_words import progress_text

T = TypeVar("T")
Progress = Callable[[str], None]  # hears a request's progress, in words
# the request, given the connection, what is left of the whole time, and the progress callback
Send = Callable[[Client, float, ProgressFnT], Awaitable[T]]


class McpServer(Protocol):
    """What a request needs of its server (agentd.tools.mcp_server.McpServer)."""

    name: str
    spec: McpServerSpec
    slots: asyncio.Semaphore

    async def connection(self, wait: float) -> tuple[Client, asyncio.Event]: ...

    async def renewed(self, old: Client) -> Client: ...

    def connection_lost(self) -> None: ...


async def limited(
    server: McpServer,
    what: str,
    send: Send[T],
    on_progress: Progress | None = None,
    holds: list[Callable[[float], None]] | None = None,
) -> T:
    """`send` on `server`'s connection within its limits; `what` names the request in errors. While it
    runs, `holds` has a function that allows the request that much silence from now (a person asked)."""
    spec = server.spec
    silence, whole = spec.timeout_s, spec.whole_call_s
    client, expired = await server.connection(min(silence, 5.0))
    loop = asyncio.get_running_loop()
    hard = loop.time() + whole
    limit = asyncio.timeout(min(silence, whole))

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        limit.reschedule(min(loop.time() + silence, hard))
        if on_progress is not None:
            on_progress(progress_text(what, progress, total, message))

    def hold(seconds: float) -> None:
        limit.reschedule(min(loop.time() + seconds, hard))

    async def once(client: Client) -> T:
        async with server.slots:
            return await send(client, max(hard - loop.time(), 0.001), progressed)

    if holds is not None:
        holds.append(hold)
    try:
        async with limit:
            try:
                return await once(client)
            except MCPError:
                if not expired.is_set():
                    raise
                return await once(await server.renewed(client))
    except TimeoutError:
        raise ToolError(_late(server, what, loop.time() >= hard - 0.01)) from None
    except MCPError as e:
        if e.code == types.CONNECTION_CLOSED:
            server.connection_lost()
            raise ToolError(
                f"the tool server {server.name} stopped during the call; it is being restarted"
            ) from None
        if e.code == types.REQUEST_TIMEOUT:
            raise ToolError(_late(server, what, True)) from None
        raise ToolError(f"{server.name} refused the call to {what}: {e.message}") from None
    finally:
        if holds is not None:
            holds.remove(hold)


def _late(server: McpServer, what: str, past_max: bool) -> str:
    if past_max:
        return f"{what} on {server.name} did not finish within {server.spec.whole_call_s:g} s (max_s)"
    return f"{what} on {server.name} did not answer within {server.spec.timeout_s:g} s"
