"""`/model`: the conversation's model, and switching it among the agent file's `models_allowed`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.events import InboundEvent

if TYPE_CHECKING:
    from agentd.engine.commands import CommandResult
    from agentd.engine.conversation import Conversation


async def switch_model(conv: Conversation, event: InboundEvent) -> CommandResult:
    from agentd.engine.commands import CommandResult

    return CommandResult(f"Model: {conv.spec.model.name}", "model")
