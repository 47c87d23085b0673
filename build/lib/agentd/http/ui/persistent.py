"""Persistent memory on the pages: the keys each speaker's prompt lists, and one value on demand.

A conversation page lists keys only, as the system prompt does; a value is read
when its key is opened. With `persistent_scope: user` every speaker of the
conversation gets their own list, and a value is looked up in that speaker's
scope only, as a turn would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.engine.agent import Agent

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


def persistent_keys(agent: Agent, key: str, transcript: list[dict[str, Any]]) -> PersistentKeys | None:
    """The keys the prompt lists: the agent's, or one list per speaker seen in the transcript."""
    spec = agent.spec
    if not spec.memory.persistent:
        return None
    if spec.memory.persistent_scope != "user":
        return PersistentKeys(
            per_user=False, speakers=[SpeakerKeys(None, "keys", agent.memory_keys(key, None))]
        )
    users = dict.fromkeys(m.get("user_id") for m in transcript if m["role"] == "user")
    speakers = [SpeakerKeys(user, user or ANONYMOUS, agent.memory_keys(key, user)) for user in users]
    return PersistentKeys(per_user=True, speakers=speakers)


def whose(agent: Agent, user: str | None) -> str:
    if agent.spec.memory.persistent_scope != "user":
        return "shared by every conversation of this agent"
    return f"{user}'s own" if user else f"{ANONYMOUS}'s, in this conversation only"
