"""The one tool seam: a spec the provider sends (name, description, input schema) and a call.

Memory tools, sub-agents and MCP servers' tools all reach the engine as a
`Tool`; where one comes from (`source`: `memory`, `agents` or an MCP server's
name) and its name there (`origin`) are what the policy patterns and the audit
trail name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentd.config.tools import BUILTIN_SOURCES, MEMORY_SOURCE
from agentd.providers.base import ToolSpec


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Who is calling: the conversation, run and person a tool call belongs to."""

    conversation_key: str
    run_id: str
    user_id: str | None
    sent_at: float | None = None  # when the message being answered was sent, if the channel said
    linked: tuple[str, ...] = ()  # the user ids of the caller's other accounts (one person, linked)
    # hears how far a long call is, in words (an MCP server's progress), to show in the streamed reply
    on_progress: Callable[[str], None] | None = None
    who: str | None = None  # the person (InboundEvent.who): what they own (jobs) is theirs to change
    # whom model work done for this call is charged to (agentd.engine.metering.Served, set by the turn):
    # an MCP server's sampling request arrives on the server's own task, which does not know
    charged_to: object = None


@dataclass(frozen=True, slots=True)
class ToolFile:
    """A file a tool made (an MCP server's image or audio): the engine checks it against `media:`,
    stores it like a person's file, shows it to a model that sees, and sends it with the reply."""

    data: bytes
    mime_type: str
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result with files beside its text (a plain `str` result is the text alone)."""

    text: str
    files: tuple[ToolFile, ...] = ()


Handler = Callable[[dict[str, Any], ToolCall], Awaitable[str | ToolOutput]]


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    handler: Handler
    source: str = MEMORY_SOURCE  # memory | agents | an MCP server's name
    origin: str | None = None  # the tool's own name at its source (None: spec.name)
    # arguments never written to the audit trail, whatever audit_args says (memory values)
    private_args: frozenset[str] = frozenset()
    # arguments the tool knows are no secret whatever their name (a memory's `key`): not redacted by name
    plain_args: frozenset[str] = frozenset()
    # what an MCP server's annotations state (readOnlyHint, destructiveHint, ...), as `agentd tools` shows
    hints: tuple[tuple[str, bool], ...] = ()
    destructive: bool = False  # its server says so (destructiveHint, not readOnlyHint): asked by default

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def origin_name(self) -> str:
        return self.origin or self.spec.name

    @property
    def server(self) -> str | None:
        """The MCP server this tool belongs to, or None for a built-in tool."""
        return None if self.source in BUILTIN_SOURCES else self.source


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }
