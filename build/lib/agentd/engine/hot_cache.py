"""One memory budget, in bytes, for the hot threads of every agent of the process.

Hot threads keep a turn from re-reading and re-decoding its history, but a
budget by conversation count let a daemon's memory grow with conversation
length: 300 conversations of 3,000 messages held 1.45 GB. Here every agent's
`HotThreads` registers its threads in one LRU across agents, each charged an
estimate of its size; past the budget the least recently used are dropped
(their next turn reloads them). A thread whose conversation is in the middle
of a turn is never dropped: two copies of one hot thread would diverge.

The estimate is cheap and incremental: the characters a thread holds (kept up
to date by whoever changes it, `StoredThread.chars`) plus a fixed cost per
loaded message for its objects, measured with tracemalloc at ~1,100 bytes.
Text outside Latin-1 costs CPython 2-4 bytes a character, so such threads are
under-counted by up to that factor.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol

from agentd.store.records import StoredThread

MESSAGE_BYTES = 1100  # a loaded message's objects besides its text (StoredMessage, Message, parts, ids)
THREAD_BYTES = 600  # the thread's own objects


def thread_bytes(thread: StoredThread) -> int:
    return THREAD_BYTES + MESSAGE_BYTES * len(thread.messages) + thread.chars


class Owner(Protocol):
    """An agent's HotThreads, as the budget sees it."""

    def in_use(self, key: str) -> bool:
        """Whether the conversation is in the middle of something (then it is not dropped)."""
        ...

    def drop(self, key: str) -> None:
        """Forget the thread (the budget dropped it)."""
        ...


class HotBudget:
    """The LRU of every agent's hot threads, bounded by their estimated bytes."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._lru: OrderedDict[tuple[int, str], tuple[Owner, int]] = OrderedDict()

    def charge(self, owner: Owner, key: str, thread: StoredThread) -> None:
        """The thread was just used (or changed): it becomes the most recent, at its current size."""
        slot = (id(owner), key)
        size = thread_bytes(thread)
        previous = self._lru.pop(slot, None)
        if previous is not None:
            self.bytes -= previous[1]
        self._lru[slot] = (owner, size)
        self.bytes += size
        if self.bytes > self.budget:
            self._evict(keep=slot)

    def release(self, owner: Owner, key: str) -> None:
        """The owner forgot the thread itself (its agent closed, a thread replaced)."""
        previous = self._lru.pop((id(owner), key), None)
        if previous is not None:
            self.bytes -= previous[1]

    def _evict(self, keep: tuple[int, str]) -> None:
        """Drop the least recently used until within budget, sparing `keep` and threads in use."""
        for _ in range(len(self._lru)):
            if self.bytes <= self.budget:
                return
            slot = next(iter(self._lru))
            owner, size = self._lru[slot]
            if slot == keep or owner.in_use(slot[1]):
                self._lru.move_to_end(slot)  # in use is as good as just used
                continue
            del self._lru[slot]
            self.bytes -= size
            self.evictions += 1
            owner.drop(slot[1])

    def stats(self) -> dict[str, Any]:
        looked_up = self.hits + self.misses
        return {
            "bytes": self.bytes,
            "budget_bytes": self.budget,
            "entries": len(self._lru),
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / looked_up, 4) if looked_up else None,
            "evictions": self.evictions,
        }
