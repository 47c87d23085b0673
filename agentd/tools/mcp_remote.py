"""A tool as its MCP server lists it, and what its listing says beyond name and schema.

The annotations are hints the server gives (the spec: never to be trusted
from an untrusted server, so a hint only ever makes agentd more careful, never
less): `destructiveHint: true` on a tool that is not `readOnlyHint` puts it
under `ask` unless the file names it in `allow` (agentd.tools.policy). Only a
hint the server states counts: the spec's default for an unannotated tool is
"destructive", which would put every tool of every server under `ask`.

A tool that declares `execution.taskSupport: "required"` can only be called as
a task (create, poll, result, cancel). The SDK defines the task types but
cannot receive a task: its session validates every `tools/call` answer as a
CallToolResult, and a CreateTaskResult fails that (tried against
server-everything's simulate-research-query: `content: Field required`,
while the server's task goes on running). So such a tool is not offered, and
`agentd tools` says why, instead of the model meeting `-32601 ... requires
task augmentation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types

# The annotations' hints by the names the spec gives them, as `agentd tools` shows them.
HINTS = {
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}
TASKS_REQUIRED = (
    'it declares execution.taskSupport: "required" (callable only as an MCP task), and the MCP SDK '
    "agentd uses cannot receive a task (it takes a tools/call answer only as a CallToolResult)"
)


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool as its server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    hints: tuple[tuple[str, bool], ...] = ()  # the hints the server states, by their spec names
    not_offered: str | None = None  # why the model is not given this tool, when it is not

    @property
    def destructive(self) -> bool:
        """What the server states: destructive and not read-only."""
        stated = dict(self.hints)
        return stated.get("destructiveHint") is True and stated.get("readOnlyHint") is not True


def remote_tool(tool: types.Tool) -> RemoteTool:
    annotations = tool.annotations
    hints = tuple(
        (spec_name, value)
        for field, spec_name in HINTS.items()
        if annotations is not None and (value := getattr(annotations, field)) is not None
    )
    required = tool.execution is not None and tool.execution.task_support == "required"
    return RemoteTool(
        tool.name,
        tool.description or tool.title or "",
        dict(tool.input_schema),
        hints,
        TASKS_REQUIRED if required else None,
    )
