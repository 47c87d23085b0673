"""Per-conversation ordering and the in-memory hot threads.

One FIFO lock per conversation key: events of a conversation run one at a
time in arrival order, different conversations run concurrently. Hot threads
stay in memory (written through on every commit) so a turn never re-reads or
re-decodes a long history; the least recently used are dropped past a bound
and reloaded from the file when needed.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentd.store.db import AgentStore
from agentd.store.transcripts import StoredThread, load_active_thread


class ConversationLocks:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        self._holders[key] = self._holders.get(key, 0) + 1
        try:
            async with lock:  # asyncio.Lock wakes waiters in FIFO order
                yield
        finally:
            self._holders[key] -= 1
            if not self._holders[key]:
                del self._holders[key]
                del self._locks[key]

    def busy(self) -> int:
        return len(self._locks)


class HotThreads:
    """LRU of the active threads of recently used conversations."""

    def __init__(self, store: AgentStore, capacity: int = 2000):
        self._store = store
        self._capacity = capacity
        self._threads: OrderedDict[str, StoredThread] = OrderedDict()

    async def get(self, key: str) -> StoredThread:
        thread = self._threads.get(key)
        if thread is not None:
            self._threads.move_to_end(key)
            return thread
        thread = await self._store.read(lambda conn: load_active_thread(conn, key))
        self.put(thread)
        return thread

    def peek(self, key: str) -> StoredThread | None:
        return self._threads.get(key)

    def put(self, thread: StoredThread) -> None:
        self._threads[thread.conversation_key] = thread
        self._threads.move_to_end(thread.conversation_key)
        while len(self._threads) > self._capacity:
            self._threads.popitem(last=False)

    def __len__(self) -> int:
        return len(self._threads)
