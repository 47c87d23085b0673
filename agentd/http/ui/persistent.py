"""Persistent memory on the pages: the keys each speaker's prompt lists, and one value on demand.

A conversation page lists keys only, as the system prompt does; a value is read
when its key is opened. With `persistent_scope: user` every speaker of the
conversation gets their own list, and a value is looked up in that speaker's
scope only, through the same `persistent_scope` a turn uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.engine.runtime import AgentRuntime
from agentd.engine.turn import persistent_scope
from agentd.store.memories import get_memory
from agentd.store.transcripts import StoredThread

ANONYMOUS = "a speaker without a user id"


@dataclass(frozen=True, slots=True)
class SpeakerKeys:
    user: str | None  # whose scope (the value's link carries it); None: shared, or anonymous
    title: str
    held: list[str]


@dataclass(frozen=True, slots=True)
class PersistentKeys:
    per_user: bool
    speakers: list[SpeakerKeys]


def persistent_keys(runtime: AgentRuntime, thread: StoredThread) -> PersistentKeys | None:
    """The keys the prompt lists: the agent's, or one list per speaker seen in the thread."""
    spec = runtime.spec
    if not spec.memory.persistent:
        return None
    key = thread.conversation_key
    if spec.memory.persistent_scope != "user":
        shared = runtime.memory.keys(persistent_scope(spec, key, None))
        return PersistentKeys(per_user=False, speakers=[SpeakerKeys(None, "keys", shared)])
    users = dict.fromkeys(m.message.user_id for m in thread.messages if m.message.role == "user")
    speakers = [
        SpeakerKeys(user, user or ANONYMOUS, runtime.memory.keys(persistent_scope(spec, key, user)))
        for user in users
    ]
    return PersistentKeys(per_user=True, speakers=speakers)


def whose(runtime: AgentRuntime, user: str | None) -> str:
    if runtime.spec.memory.persistent_scope != "user":
        return "shared by every conversation of this agent"
    return f"{user}'s own" if user else f"{ANONYMOUS}'s, in this conversation only"


async def memory_value(
    runtime: AgentRuntime, conversation_key: str, name: str, user: str | None
) -> str | None:
    """What `recall name` returns to `user` in this conversation, or None when they hold no such key."""
    scope = persistent_scope(runtime.spec, conversation_key, user)
    return await runtime.store.read(lambda conn: get_memory(conn, scope, name))
