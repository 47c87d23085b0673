"""A stateless call: the caller brings the whole conversation, and nothing of it is kept.

An API client that names no conversation (the OpenAI-compatible endpoint
without `user` or a conversation header) sends the conversation so far with
every call. That history replaces the agent's memory for the one turn: no
thread is read or written, no memory work follows, no command runs (a "/..."
line is text for the model). The turn is still a run, recorded under the
caller's key with its model, tokens and status, as every model call is. The
agent's tools stay its tools: persistent memory, when it has it, is the
agent's, not the conversation's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentd.engine.conversation import Conversation
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.state import AgentState
from agentd.engine.turn import TurnOptions, run_turn
from agentd.events import InboundEvent, Reply
from agentd.memory.base import Memory, MemoryContext, MemoryView, TurnInput
from agentd.messages import Message
from agentd.store.records import StoredThread


class GivenHistory:
    """The history the caller sent, as the one turn's memory; keeps nothing."""

    kind = "given"
    layer = "given"
    keeps_transcript = False

    def __init__(self, messages: Sequence[Message]):
        self._messages = tuple(messages)

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        return MemoryView(messages=self._messages)

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        return {"kind": self.kind, "layer": self.layer, "sees": "the messages the caller sent"}


async def run_stateless(
    state: AgentState,
    lifecycle: Lifecycle,
    event: InboundEvent,
    earlier: Sequence[Message],
    options: TurnOptions,
) -> Reply:
    # the conversation is the caller's history under the definition read once, as every turn does;
    # it is not opened: no lock and no claim, nothing of a conversation is read or written
    memory = Memory.of(GivenHistory(earlier))
    conv = Conversation(state, state.spec, memory, StoredThread(event.conversation_key))
    with lifecycle.busy():
        # nothing holds a conversation here, so nobody can be asked to approve a call: it is refused
        result = await run_turn(conv, event, replace(options, can_ask=False))
        return result.reply
