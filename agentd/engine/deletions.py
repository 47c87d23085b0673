"""Deleting on request (the operator's, through the API): a whole conversation, one persistent memory.

Each waits for what is running on the conversation (its turn, its memory work), commits
its deletion with an audit row naming who asked, and only then changes what is cached.
"""

from __future__ import annotations

import time

from agentd.engine.state import AgentState
from agentd.store.base import write_one
from agentd.store.records import StoredThread
from agentd.store.writes import DeleteConversation


async def delete_conversation(state: AgentState, conversation_key: str, by: str) -> dict[str, int]:
    """Every thread of the conversation, archived ones too; returns how many threads and messages.

    Episodes and facts made of it stay: they are the person's memories (forget-episodes deletes them).
    """
    key = conversation_key
    async with state.locks.hold(key), state.memory_locks.hold(key), state.store.claim(key):
        deleted = await write_one(state.store, DeleteConversation(state.name, key, by, time.time()))
        state.threads.put(StoredThread(key))  # the next message starts a fresh thread
        state.chosen_models.pop(key, None)  # its /model choice went with it
    return dict(deleted)


async def forget_memory(state: AgentState, key: str, scope: str, by: str) -> None:
    """Delete one persistent memory of `scope` ("" the agent's, user:<id> a person's, conversation:<key>
    an anonymous conversation's); ToolError when the key is malformed or not held there."""
    await state.persistent.forget(key, scope=scope, conversation_key=None, run_id=None, by=by)
