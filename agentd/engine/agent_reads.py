"""What the API, the CLI and the pages read of an agent: transcripts, files, memory, runs, deliveries,
conversations, the next prompt and the inspector. `Agent` is this and what changes an agent."""

from __future__ import annotations

from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.inspect import inspect_conversation, next_prompt
from agentd.engine.state import AgentState
from agentd.memory.persistent import persistent_scope
from agentd.messages import MESSAGE_ADAPTER
from agentd.store.queries import (
    ActiveThread,
    Conversations,
    DeliveredReply,
    MediaBlobs,
    MediaFile,
    MemoryValue,
    Runs,
)
from agentd.store.records import Delivered


class AgentReads:
    state: AgentState

    @property
    def spec(self) -> AgentSpec:
        return self.state.spec

    async def ready(self) -> None:
        """Open the data at its first use (Agent.ready)."""
        raise NotImplementedError

    async def transcript(self, conversation_key: str) -> list[dict[str, Any]]:
        """The active thread's uncompacted messages, as JSON-ready dicts (read from the store: the hot
        thread may hold only what the memory reads)."""
        await self.ready()
        thread = await self.state.store.read(ActiveThread(conversation_key))
        return [
            MESSAGE_ADAPTER.dump_python(m.message, mode="json", exclude_none=True) for m in thread.messages
        ]

    async def media_file(self, conversation_key: str, sha256: str) -> bytes | None:
        """A file sent in the conversation, by its hash (the inspector's thumbnails); None: not kept."""
        await self.ready()
        found: dict[str, bytes] = await self.state.store.read(MediaBlobs(conversation_key, [sha256]))
        return found.get(sha256)

    async def media_by_hash(self, sha256: str) -> tuple[bytes, str, str | None] | None:
        """A file of this agent's by its hash (GET /agents/{agent}/media/{sha256}): bytes, type, name."""
        await self.ready()
        found: tuple[bytes, str, str | None] | None = await self.state.store.read(MediaFile(sha256))
        return found

    def memory_keys(self, conversation_key: str, user_id: str | None) -> list[str]:
        """The persistent-memory keys the prompt of `user_id` in this conversation lists."""
        return self.state.memory_keys(self.spec, conversation_key, user_id)

    async def memory_value(self, conversation_key: str, key: str, user_id: str | None) -> str | None:
        """What `recall key` returns to `user_id` in this conversation (None: no such key in their scope)."""
        await self.ready()
        scope = persistent_scope(self.spec.memory, conversation_key, user_id)
        return await self.state.store.read(MemoryValue(scope, key))

    async def runs(self, conversation_key: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        await self.ready()
        return await self.state.store.read(Runs(conversation_key, limit))

    async def delivered(self, channel: str, event_id: str) -> Delivered | None:
        """What a delivery already answered became (an idempotent retry is answered with it)."""
        await self.ready()
        return await self.state.store.read(DeliveredReply(channel, event_id))

    async def conversations(self, limit: int = 200, offset: int = 0) -> list[dict[str, Any]]:
        await self.ready()
        return await self.state.store.read(Conversations(limit, offset))

    async def next_prompt(self, conversation_key: str, user_id: str | None = None) -> dict[str, Any]:
        await self.ready()
        return await next_prompt(self.state, conversation_key, user_id)

    async def inspect(self, conversation_key: str) -> dict[str, Any]:
        await self.ready()
        return await inspect_conversation(self.state, conversation_key)
