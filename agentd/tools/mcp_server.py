"""One MCP server of one agent: connected by its own task, reconnected with backoff, called with limits.

The connection lives in one task (the SDK's client is an async context
manager built on anyio task groups, which must be left by the task that
entered them); turns call through it from their own tasks. The tool list is
read at connect and again whenever the server says it changed: a
`notifications/tools/list_changed` on a 2025-era connection, a
`subscriptions/listen` event on a 2026 one. A server that goes away (its
process exits, its stream drops, a call finds the connection closed) is
reconnected after a backoff pause (1 s doubling to 60 s, reset once a
connection has lived a minute).

A connection is stopped the way the SDK is written to be stopped: by
cancelling the anyio cancel scope that holds it (and the connect deadline is
that scope's deadline), never by a native `Task.cancel()` or
`asyncio.timeout`. The SDK's stdio transport closes the server's stdin, waits,
terminates and kills it inside a shielded, bounded shutdown; a native
cancellation landing in that shutdown (a stop during `initialize`, then the
connect timeout) aborted it and left its reader draining a live server
forever: the reload loop hung, the process leaked, SIGTERM no longer stopped
agentd.

Every call has limits (agentd.tools.mcp_calls), and a cap on the result's size
(cut, with a note the model reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any, cast

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentd.backoff import backoff_delays
from agentd.config.tools import McpServerSpec
from agentd.errors import ToolError
from agentd.tools.base import ToolOutput
from agentd.tools.mcp_callbacks import Elicitor, Sampler, ServerCallbacks
from agentd.tools.mcp_calls import Progress, limited
from agentd.tools.mcp_remote import RemoteTool, remote_tool
from agentd.tools.mcp_resources import READ, has_resources
from agentd.tools.mcp_results import result_output
from agentd.tools.mcp_stderr import ServerStderr
from agentd.tools.mcp_transport import transport_of, watched
from agentd.tools.mcp_words import describe_failure
from agentd.tools.naming import model_tool_name

log = logging.getLogger(__name__)
CLIENT_INFO = types.Implementation(name="agentd", version="0.1.0")
STABLE_AFTER_S = 60.0  # a connection that lived this long resets the backoff
MAX_LIST_PAGES = 100
# How long a stop waits for the connection to close. The SDK's stdio shutdown is bounded by itself
# (0.5 s flush, 2 s for the server to exit once its stdin closes, SIGTERM, 2 s, SIGKILL, 2 s to reap);
# past this the supervisor is left to finish on its own rather than hang the caller (a reload, a stop).
STOP_BOUND_S = 10.0


class McpServer:
    def __init__(
        self,
        agent: str,
        name: str,
        spec: McpServerSpec,
        on_tools: Callable[[], None],
        sampler: Callable[[], Sampler | None] = lambda: None,
        elicitor: Callable[[], Elicitor | None] = lambda: None,
    ):
        self.agent = agent
        self.name = name
        self.spec = spec
        self.status = "starting"  # starting | running | restarting | stopped
        self.error: str | None = None
        self.restarts = 0
        self.protocol: str | None = None
        self.tools: list[RemoteTool] = []
        self.listed = False  # whether the server has listed its tools at least once
        self.resources = False  # whether it offers resources (then read as tools: mcp_resources)
        self._on_tools = on_tools
        self._stderr = ServerStderr(agent, name) if spec.command is not None else None
        self.callbacks = ServerCallbacks(agent, name, spec, sampler, elicitor)
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._started = asyncio.Event()  # the first connection was made or failed: no longer "starting"
        self._first_deadline = time.monotonic() + spec.connect_timeout_s
        self._lost = asyncio.Event()
        self._expired = asyncio.Event()  # the HTTP server no longer knows this connection's session
        self._new_connection = asyncio.Event()  # set (and replaced) at each connection made
        self._stopping = asyncio.Event()
        self.slots = asyncio.Semaphore(spec.max_concurrent_calls)
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None  # the connection being made or held
        self._refreshes: set[asyncio.Task[None]] = set()

    def describe(self) -> dict[str, Any]:
        return {
            "transport": self.spec.transport,
            "status": self.status,
            "error": self.error,
            "restarts": self.restarts,
            "protocol": self.protocol,
            "tools": [t.name for t in self.tools],
            "resources": self.resources,
            "not_offered": {t.name: t.not_offered for t in self.tools if t.not_offered},
            # a stdio server's last lines on stderr (why it crashed, most often)
            "stderr": list(self._stderr.tail) if self._stderr is not None else [],
            "exit_status": self._stderr.returncode() if self._stderr is not None else None,
            "log": list(self.callbacks.log.recent),  # its last `notifications/message`
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._first_deadline = time.monotonic() + self.spec.connect_timeout_s
        self._task = asyncio.get_running_loop().create_task(self._supervise())

    async def wait_started(self, timeout: float) -> None:
        """While the server makes its first connection, wait for it to be made or to fail: at most
        `timeout`, and never past the connect timeout (a message must not be answered without the
        tools of a server that is a moment from connecting, nor wait on one that is down)."""
        left = min(timeout, self._first_deadline - time.monotonic() + 0.5)
        if not self._started.is_set() and left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._started.wait(), left)

    async def stop(self) -> None:
        """Close the connection by cancelling its scope, and wait for it, bounded by STOP_BOUND_S.

        The wait is `asyncio.wait`, which does not cancel the supervisor when the caller is
        cancelled (a daemon stopping during a reload); the stop is then waited for all the same
        (bounded), and the caller's cancellation goes on.
        """
        self._stopping.set()
        if self._scope is not None:
            self._scope.cancel()
        for refresh in self._refreshes:
            refresh.cancel()  # a tools/list request in flight: an ordinary request, not the transport
        pending = {t for t in (self._task, *self._refreshes) if t is not None and not t.done()}
        if pending:
            try:
                _, left = await asyncio.wait(pending, timeout=STOP_BOUND_S)
            except asyncio.CancelledError:
                # the caller is cancelled (the daemon stopping mid-reload): the server is still stopped
                # first, or the loop's end would cancel the supervisor natively and orphan the process
                await asyncio.wait(pending, timeout=STOP_BOUND_S)
                raise
            if left:
                log.error(
                    "agent %s: MCP server %s did not stop within %g s; left to finish on its own",
                    self.agent,
                    self.name,
                    STOP_BOUND_S,
                )
        self.status, self._client = "stopped", None
        self._ready.clear()
        self._started.set()

    async def wait_ready(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self._ready.is_set()

    async def _supervise(self) -> None:
        delays = backoff_delays(1.0, 60.0)
        while not self._stopping.is_set():
            started = time.monotonic()
            renew = False
            try:
                await self._serve()
                error = "the server closed the connection"
                if self._expired.is_set():
                    # the spec: a 404 for the session means start a new one (the server restarted)
                    error, renew = "the server no longer knows the session; opening a new one", True
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error = describe_failure(e)
            self._ready.clear()
            self._client = None
            if self._stopping.is_set():
                return
            if self._stderr is not None:
                ended, said = self._stderr.ended(), self._stderr.last()
                error += f"; {ended}" if ended else ""
                error += f"; its stderr said: {said}" if said else ""
            if time.monotonic() - started > STABLE_AFTER_S:
                delays = backoff_delays(1.0, 60.0)
            # a session that expired after it worked is renewed at once; anything else backs off
            wait = 0.0 if renew else next(delays)
            self.status, self.error = "restarting", error
            self._started.set()
            self.restarts += 1
            log.warning(
                "agent %s: MCP server %s is down (%s); reconnecting in %.1f s",
                self.agent,
                self.name,
                error,
                wait,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)

    async def _serve(self) -> None:
        """Connect, list the tools, then keep the connection until it is lost or the agent stops.

        All of it runs in one anyio cancel scope: its deadline is the connect timeout (lifted once
        connected), and `stop` cancels it. A cancelled scope is how the SDK's transports expect to be
        left: their shutdown is shielded and bounded, and finishes.
        """
        self._lost = lost = asyncio.Event()
        self._expired = expired = asyncio.Event()

        def session_gone() -> None:
            expired.set()
            lost.set()

        client = Client(
            watched(transport_of(self.spec, self._stderr, session_gone), lost),
            client_info=CLIENT_INFO,
            message_handler=self._on_message,
            cache=None,  # the tool list is ours to cache: refreshed when the server says it changed
            **self.callbacks.client_options(),
        )
        connected = False
        with anyio.CancelScope(deadline=anyio.current_time() + self.spec.connect_timeout_s) as scope:
            self._scope = scope
            if self._stopping.is_set():
                scope.cancel()
            try:
                async with contextlib.AsyncExitStack() as stack:
                    await stack.enter_async_context(client)
                    self.protocol = client.protocol_version
                    self.resources = await has_resources(client)
                    await self.callbacks.log.ask_for_messages(client)
                    await self._list_tools(client)
                    scope.deadline, connected = math.inf, True
                    self._client = client
                    self._new_connection.set()
                    self._new_connection = asyncio.Event()
                    self.status, self.error = "running", None
                    self._ready.set()
                    self._started.set()
                    log.info(
                        "agent %s: MCP server %s connected (%d tools)", self.agent, self.name, len(self.tools)
                    )
                    await self._hold(client, lost)
            finally:
                self._scope = None
        if scope.cancelled_caught and not connected and not self._stopping.is_set():
            raise TimeoutError("no answer while connecting")

    async def _hold(self, client: Client, lost: asyncio.Event) -> None:
        """Keep a connection (and its `subscriptions/listen` stream) until it is lost or the agent stops."""
        async with anyio.create_task_group() as group:
            if self.protocol in MODERN_PROTOCOL_VERSIONS:
                group.start_soon(self._listen, client)
            stop = asyncio.ensure_future(self._stopping.wait())
            gone = asyncio.ensure_future(lost.wait())
            try:
                await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                gone.cancel()
                group.cancel_scope.cancel()

    async def _listen(self, client: Client) -> None:
        """2026-era servers announce tool changes on a `subscriptions/listen` stream."""
        capabilities = client.server_capabilities.tools
        if capabilities is None or not capabilities.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    await self._list_tools(client)
        except (ListenNotSupportedError, MCPError):
            return
        except SubscriptionLost:
            self._lost.set()  # the stream went with the connection

    async def _on_message(self, message: Any) -> None:
        """2025-era servers send `notifications/tools/list_changed`; it may not wait on a request here."""
        if isinstance(message, types.ToolListChangedNotification) and self._client is not None:
            task = asyncio.get_running_loop().create_task(self._refresh(self._client))
            self._refreshes.add(task)
            task.add_done_callback(self._refreshes.discard)

    async def _refresh(self, client: Client) -> None:
        try:
            await self._list_tools(client)
        except Exception as e:
            log.warning("agent %s: MCP server %s: listing its tools failed: %s", self.agent, self.name, e)

    async def _list_tools(self, client: Client) -> None:
        listed: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed += [remote_tool(t) for t in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools, self.listed = listed, True
        self._on_tools()

    # -- calls -------------------------------------------------------------------------------

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any], on_progress: Progress | None = None
    ) -> ToolOutput:
        """The tool's result as text for the model and its files; ToolError when it failed or could not be called
        (agentd.tools.mcp_calls: the limits); `on_progress` hears the server's progress in words."""

        async def send(client: Client, left: float, progressed: ProgressFnT) -> types.CallToolResult:
            # a progress callback is what makes the SDK send a progressToken
            return await client.call_tool(
                tool,
                arguments,
                read_timeout_seconds=left,
                progress_callback=progressed,
                meta=cast(types.RequestParamsMeta, meta),
            )

        result = await limited(self, tool, send, on_progress, self.callbacks.holds)
        reader = model_tool_name(self.name, READ) if self.resources else None
        output = result_output(result, self.spec.max_result_chars, reader)
        if result.is_error:
            raise ToolError(output.text or f"{tool} failed")
        return output

    async def connection(self, wait: float) -> tuple[Client, asyncio.Event]:
        """The connection to make a request on (waiting at most `wait` for one), and the event set
        if its HTTP session expires; ToolError when the server is not running."""
        if not self._ready.is_set() and not await self.wait_ready(wait):
            why = f" ({self.error})" if self.error else ""
            raise ToolError(
                f"the tool server {self.name} is not running{why}; try again later or answer without it"
            )
        assert self._client is not None
        return self._client, self._expired

    def connection_lost(self) -> None:
        """A request found the connection closed: reconnect now, not at the next request."""
        self._lost.set()

    async def renewed(self, old: Client) -> Client:
        """The connection that replaces `old`, once it is made (the caller bounds the wait)."""
        while self._client is None or self._client is old:
            await self._new_connection.wait()
        return self._client
