"""The MCP servers of one agent, as the engine sees them: tools to offer, and their state.

Servers start with the agent, and on a reload only the servers whose
definition changed are restarted (a removed one is stopped, a new one
started). Each server's tools reach the model as `<server>__<tool>` with the
server's description and input schema. A policy pattern that matches none of
a running server's tools is a problem of that server, named in `GET /agents`
and `agentd tools`; that server's tools are then not offered at all, since a
misspelled `deny` would otherwise allow what it was meant to forbid.

A server that lists resources also gets `<server>__list_resources` and
`<server>__read_resource` (agentd.tools.mcp_resources); a tool the engine
cannot call (task-only: agentd.tools.mcp_remote) is not offered, and
`describe` says why. What a server asks of the agent mid-call (the person's
input, the model) goes to the engine's `elicitor` and `sampler`, for the call
in flight on that server.

A turn that begins while a server is still making its first connection (the
first messages after a start or a reload) waits for it, at most that server's
connect timeout, so the model is not answered without its tools; a server
that is down (restarting) is not waited for.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from agentd.config.tools import McpServerSpec, ToolsSpec
from agentd.providers.base import ToolSpec
from agentd.tools.base import Handler, Tool, ToolCall, ToolOutput
from agentd.tools.mcp_callbacks import Elicitor, Sampler
from agentd.tools.mcp_remote import RemoteTool
from agentd.tools.mcp_resources import call_resource_tool, resource_tools
from agentd.tools.mcp_server import McpServer
from agentd.tools.naming import model_tool_name
from agentd.tools.policy import Policy

log = logging.getLogger(__name__)
META_PREFIX = "agentd/"  # the `_meta` keys a server can read who is asking from


class McpServers:
    def __init__(self, agent: str):
        self.agent = agent
        self.spec = ToolsSpec()
        self.servers: dict[str, McpServer] = {}
        self._tools: dict[str, list[Tool]] = {}  # per server, rebuilt when its tool list changes
        self._problems: dict[str, list[str]] = {}
        self.sampler: Sampler | None = None  # the engine's, for servers with `sampling: true`
        self.elicitor: Elicitor | None = None  # the engine's: a server asking the person for input

    async def apply(self, spec: ToolsSpec) -> None:
        """Run the servers `spec` lists: new ones start, changed ones restart, removed ones stop."""
        self.spec = spec
        for name, server in list(self.servers.items()):
            if spec.mcp.get(name) != server.spec:
                await self._stop(name)
        for name, server_spec in spec.mcp.items():
            if name not in self.servers:
                self._start(name, server_spec)
        for name in self.servers:
            self._recheck(name)  # the patterns may have changed with the file

    def _start(self, name: str, spec: McpServerSpec) -> None:
        server = McpServer(
            self.agent, name, spec, lambda: self._recheck(name), lambda: self.sampler, lambda: self.elicitor
        )
        self.servers[name] = server
        server.start()

    async def _stop(self, name: str) -> None:
        server = self.servers.pop(name)
        self._tools.pop(name, None)
        self._problems.pop(name, None)
        await server.stop()

    async def stop(self) -> None:
        for name in list(self.servers):
            await self._stop(name)

    def _recheck(self, name: str) -> None:
        server = self.servers.get(name)
        if server is None:
            return
        # a tool the engine could not call is not offered (why is in `describe`)
        tools = [self._tool(server, remote) for remote in server.tools if not remote.not_offered]
        readers = resource_tools(server.tools) if server.resources else []
        self._tools[name] = tools + [self._resource_tool(server, remote) for remote in readers]
        if not server.listed:
            return  # whether a pattern matches is known once the server has said its tools
        listed = [t.name for t in (*server.tools, *readers)]
        problems = Policy(self.spec).unmatched(name, listed)
        if problems and problems != self._problems.get(name):
            log.error(
                "agent %s: MCP server %s: its tools are not offered: %s",
                self.agent,
                name,
                "; ".join(problems),
            )
        self._problems[name] = problems

    def _tool(self, server: McpServer, remote: RemoteTool) -> Tool:
        agent, name = self.agent, remote.name

        async def call(args: dict[str, Any], caller: ToolCall) -> ToolOutput:
            meta = {
                f"{META_PREFIX}agent": agent,
                f"{META_PREFIX}conversation_key": caller.conversation_key,
                f"{META_PREFIX}user_id": caller.user_id,
                f"{META_PREFIX}run_id": caller.run_id,
            }
            asking = server.callbacks.asking
            asking.append(caller)  # whom a request the server makes meanwhile is for
            try:
                return await server.call(name, args, meta, caller.on_progress)
            finally:
                asking.remove(caller)

        return self._offered(server, remote, call)

    def _resource_tool(self, server: McpServer, remote: RemoteTool) -> Tool:
        async def call(args: dict[str, Any], caller: ToolCall) -> str:
            return await call_resource_tool(server, remote.name, args)

        return self._offered(server, remote, call)

    def _offered(self, server: McpServer, remote: RemoteTool, call: Handler) -> Tool:
        name = remote.name
        schema = remote.input_schema or {"type": "object", "properties": {}}
        spec = ToolSpec(model_tool_name(server.name, name), remote.description, schema)
        return Tool(
            spec, call, source=server.name, origin=name, hints=remote.hints, destructive=remote.destructive
        )

    async def wait_started(self, timeout: float = math.inf) -> None:
        """Wait for the servers still making their first connection (right after a start or a
        reload), each at most its own connect timeout and all at most `timeout`; at once when none is."""
        starting = [s for s in self.servers.values() if s.status == "starting"]
        if starting:
            await asyncio.gather(*(s.wait_started(timeout) for s in starting))

    async def wait_ready(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds in all) for every server to have connected."""
        deadline = time.monotonic() + timeout
        for server in list(self.servers.values()):
            await server.wait_ready(max(deadline - time.monotonic(), 0.0))

    # -- what the engine reads ------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """Every tool of every running server without a problem (the policy is applied by the engine)."""
        return [
            tool
            for name, server in self.servers.items()
            if server.status == "running" and not self._problems.get(name)
            for tool in self._tools.get(name, ())
        ]

    def describe(self) -> dict[str, dict[str, Any]]:
        return {
            name: {**server.describe(), "problems": self._problems.get(name, [])}
            for name, server in self.servers.items()
        }
