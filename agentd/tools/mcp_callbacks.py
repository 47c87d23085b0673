"""What agentd answers an MCP server with when the server is the one asking: the client's side.

A server may send log messages (agentd.tools.mcp_logs) and ask for the
folders it may work in (`roots/list`: the server's `roots:` in the agent file,
as `file://` URIs). A capability is declared only when the file gives it
something to answer: a client that says it has roots and lists none would
leave server-filesystem with no folder at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client.session import ClientRequestContext

from agentd.config.tools import McpServerSpec
from agentd.tools.mcp_logs import LOG_LEVEL, ServerLog


def root_uri(root: str) -> str:
    """A `roots:` entry as the spec's `file://` URI (a path is made absolute and normalised)."""
    return root if root.startswith("file://") else Path(root).resolve().as_uri()


class ServerCallbacks:
    def __init__(self, agent: str, server: str, spec: McpServerSpec):
        self.spec = spec
        self.log = ServerLog(agent, server)
        self.roots = [
            types.Root.model_validate({"uri": root_uri(r), "name": Path(r).name or r}) for r in spec.roots
        ]

    def client_options(self) -> dict[str, Any]:
        """The SDK Client's callback arguments (each one declares its capability)."""
        options: dict[str, Any] = {"logging_callback": self.log.received, "log_level": LOG_LEVEL}
        if self.roots:
            options["list_roots_callback"] = self._list_roots
        return options

    async def _list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=self.roots)
