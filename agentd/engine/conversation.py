"""One conversation as one event sees it: the agent, the definition read once, its memory, its thread.

Opened in one place (`Conversation.open`), so the turn, the commands, /status and the
inspector all see the memory the conversation really gets (a sub-agent slot's
override included) and the thread that memory reads; and handed down as one object,
so none of them takes the five pieces one by one.

It opens here, not as a method of AgentState, because it holds the state: the state
cannot import it back (the engine's modules have no import circles).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.config.models import AgentSpec
from agentd.engine.state import AgentState
from agentd.memory.base import Memory, MemoryContext
from agentd.store.claims import Claim
from agentd.store.records import StoredThread


@dataclass(frozen=True, slots=True)
class Conversation:
    agent: AgentState
    spec: AgentSpec  # read once: a reload while the event is answered does not change what answers it
    memory: Memory
    thread: StoredThread

    @classmethod
    async def open(
        cls, agent: AgentState, key: str, claim: Claim | None = None, *, spec: AgentSpec | None = None
    ) -> Conversation:
        """The conversation `key` under `spec` (default: the agent's current definition). With the
        store's `claim` for a turn; without one for a view (nothing is taken; see AgentState.thread)."""
        spec = await agent.switched(agent.spec if spec is None else spec, key)  # a /model choice
        memory = agent.memory_of(spec, key)
        return cls(agent, spec, memory, await agent.thread(key, memory, claim))

    @property
    def key(self) -> str:
        return self.thread.conversation_key

    @property
    def ctx(self) -> MemoryContext:
        """The memory context the strategies get (the agent's, built once with its state)."""
        return self.agent.context
