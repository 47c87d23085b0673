"""What agentd answers an MCP server with when the server is the one asking: the client's side.

A server may send log messages (agentd.tools.mcp_logs), ask for the folders
it may work in (`roots/list`: the server's `roots:` in the agent file, as
`file://` URIs), and ask agentd's model to write something
(`sampling/createMessage`, only with `sampling: true`: the engine's Sampler
answers it, as a run of its own). A capability is declared only when the file
gives it something to answer: a client that says it has roots and lists none
would leave server-filesystem with no folder at all.

Who asked: a server's request carries no link to the call it serves on a
2025-era connection, so it is put down to the call in flight on that server
when there is exactly one (`asking`), else to nobody in particular.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import mcp_types as types
from mcp.client.session import ClientRequestContext

from agentd.config.tools import McpServerSpec
from agentd.tools.base import ToolCall
from agentd.tools.mcp_logs import LOG_LEVEL, ServerLog


class Sampler(Protocol):
    """The engine's answer to a server's `sampling/createMessage` (agentd.engine.mcp_sampling)."""

    async def sample(
        self, server: str, asker: ToolCall | None, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData: ...


def root_uri(root: str) -> str:
    """A `roots:` entry as the spec's `file://` URI (a path is made absolute and normalised)."""
    return root if root.startswith("file://") else Path(root).resolve().as_uri()


class Elicitor(Protocol):
    """The engine's answer to a server's `elicitation/create` (agentd.engine.elicitations)."""

    async def elicit(
        self, server: str, asker: ToolCall | None, params: types.ElicitRequestParams
    ) -> types.ElicitResult: ...


class ServerCallbacks:
    def __init__(
        self,
        agent: str,
        server: str,
        spec: McpServerSpec,
        sampler: Callable[[], Sampler | None],
        elicitor: Callable[[], Elicitor | None],
    ):
        self.server = server
        self.spec = spec
        self.asking: list[ToolCall] = []  # the calls in flight on this server, oldest first
        # each call in flight holds its silence timer open by this much while a person is asked
        self.holds: list[Callable[[float], None]] = []
        self._sampler = sampler
        self._elicitor = elicitor
        self.log = ServerLog(agent, server)
        self.roots = [
            types.Root.model_validate({"uri": root_uri(r), "name": Path(r).name or r}) for r in spec.roots
        ]

    def client_options(self) -> dict[str, Any]:
        """The SDK Client's callback arguments (each one declares its capability)."""
        options: dict[str, Any] = {"logging_callback": self.log.received, "log_level": LOG_LEVEL}
        if self.roots:
            options["list_roots_callback"] = self._list_roots
        if self.spec.sampling:
            options["sampling_callback"] = self._sample
        if self.spec.elicitation:
            options["elicitation_callback"] = self._elicit
        return options

    def asker(self) -> ToolCall | None:
        return self.asking[0] if len(self.asking) == 1 else None

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        elicitor = self._elicitor()
        if elicitor is None:
            return types.ElicitResult(action="cancel")
        for hold in self.holds:
            hold(math.inf)  # a person is being asked: the call is not silent (its max_s still holds)
        try:
            return await elicitor.elicit(self.server, self.asker(), params)
        finally:
            for hold in self.holds:
                hold(self.spec.timeout_s)

    async def _sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        sampler = self._sampler()
        if sampler is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="this client has no model to sample")
        return await sampler.sample(self.server, self.asker(), params)

    async def _list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=self.roots)
