"""Taking a conversation: what the engine holds while it answers one event of it.

On a single-owner store (SQLite: one daemon per data folder) the process's own
per-conversation lock is all the exclusion there is, and a claim is empty. On a
store several daemons share (PostgreSQL), claiming a conversation takes a
lease on it (in arrival order, with an expiry so a killed daemon's
conversations continue elsewhere) and reads what the daemon needs to trust its
caches: the active thread's mark and the persistent memories' version, and, told
where the daemon's cached copy of the thread stands (`KnownThread`), the few
messages that copy misses (`ThreadTail`), so catching up needs no read. Every
write made while the claim is held carries its fencing token (`current_fence`),
so a daemon that lost its lease while stalled cannot write.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from agentd.store.records import StoredMessage


@dataclass(frozen=True, slots=True)
class ThreadMark:
    """Where the active thread of a conversation stands in the store.

    `version` moves on every change that is not an append (compaction, /new,
    /reset); `next_seq` on appends; `layers_version` on every memory layer
    state write. A cached thread with the same id and version only misses the
    messages from its own next_seq on; anything else is reloaded.
    """

    thread_id: int | None
    version: int
    next_seq: int
    layers_version: int


@dataclass(frozen=True, slots=True)
class KnownThread:
    """Where the claiming daemon's cached copy of the active thread stands (told to the claim)."""

    thread_id: int
    version: int
    next_seq: int


@dataclass(frozen=True, slots=True)
class ThreadTail:
    """The messages a cached copy missed, from its next_seq (`from_seq`) to the mark's, with the thread
    header fields that moved with them: all a copy of the same thread and version needs to catch up."""

    from_seq: int
    messages: tuple[StoredMessage, ...]
    last_input_tokens: int | None
    last_tokens_estimated: bool


@dataclass(frozen=True, slots=True)
class Claim:
    """What claiming a conversation gave. Empty (all None) on a single-owner store."""

    token: int | None = None  # the fencing token of the lease
    thread: ThreadMark | None = None
    memories_version: int | None = None
    # what the known copy misses, when the store sent it (a shared store, a short tail); else None
    tail: ThreadTail | None = None


@dataclass(frozen=True, slots=True)
class Fence:
    """The lease every write in this context must still hold."""

    agent: str
    conversation_key: str
    token: int


# Set by a shared store's claim for the code that runs while it is held (the turn, its commands,
# the after-run work): the store adds the fence check to each write batch.
current_fence: ContextVar[Fence | None] = ContextVar("agentd_current_fence", default=None)
