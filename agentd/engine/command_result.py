"""What a command answers, and what a command is (agentd/engine/commands.py runs them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentd.engine.conversation import Conversation
from agentd.events import InboundEvent
from agentd.store.writes import Write


@dataclass
class CommandResult:
    text: str
    action: str
    data: dict[str, Any] = field(default_factory=dict)
    effects: Sequence[Write[Any]] = ()  # committed with the run and audit rows
    after: Callable[[], None] | None = None  # hot-state change once committed
    run_id: str | None = None  # when the command produced its own run (compaction)


# a command acts on the conversation (the agent, its definition, its memory and thread) for the event
Command = Callable[[Conversation, InboundEvent], Awaitable[CommandResult]]
