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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from agentd.store.base import Store
from agentd.store.claims import ThreadMark
from agentd.store.queries import MessagesPage, ThreadHeader
from agentd.store.records import StoredThread


class ConversationLocks:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        release = await self.acquire(key)
        try:
            yield
        finally:
            release()

    async def acquire(self, key: str) -> Callable[[], None]:
        """Take the conversation (in FIFO order); the returned function gives it back, once.

        For a holder that outlives the task that took it: a run paused for an approval keeps the
        conversation until it is decided.
        """
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        self._holders[key] = self._holders.get(key, 0) + 1
        try:
            await lock.acquire()  # asyncio.Lock wakes waiters in FIFO order
        except BaseException:
            self._leave(key)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                lock.release()
                self._leave(key)

        return release

    def _leave(self, key: str) -> None:
        self._holders[key] -= 1
        if not self._holders[key]:
            del self._holders[key]
            del self._locks[key]

    def waiting(self, key: str) -> int:
        """How many events wait for the conversation behind the one holding it."""
        return max(self._holders.get(key, 0) - 1, 0)

    def busy(self) -> int:
        return len(self._locks)


class HotThreads:
    """LRU of the active threads of recently used conversations.

    A thread not in memory is loaded in pages, each its own short job on the
    shared store thread, so loading one 10,000-message thread never stalls
    other agents' commits for the whole load. Concurrent loads of one key
    share a single load: two copies of a hot thread would silently diverge.
    """

    PAGE = 500

    def __init__(self, store: Store, capacity: int = 2000):
        self._store = store
        self._capacity = capacity
        self._threads: OrderedDict[str, StoredThread] = OrderedDict()
        self._loading: dict[str, asyncio.Future[StoredThread]] = {}

    async def get(self, key: str, mark: ThreadMark | None = None) -> StoredThread:
        """The conversation's thread; with `mark` (a shared store's claim), never a stale copy."""
        thread = self._threads.get(key)
        if thread is not None and mark is not None and not await self._catch_up(thread, mark):
            del self._threads[key]
            thread = None
        if thread is not None:
            self._threads.move_to_end(key)
            return thread
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[StoredThread] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            thread = await self._load(key)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: a load nobody else awaited must not warn
            raise
        finally:
            del self._loading[key]
        self.put(thread)
        future.set_result(thread)
        return thread

    async def _load(self, key: str) -> StoredThread:
        thread = await self._store.read(ThreadHeader(key))
        if thread.id is None:
            return thread
        thread_id, after = thread.id, 0
        while True:
            page = await self._store.read(MessagesPage(thread_id, after, self.PAGE))
            thread.messages.extend(page)
            if len(page) < self.PAGE:
                break
            after = page[-1].seq
        thread.recount()
        return thread

    async def _catch_up(self, thread: StoredThread, mark: ThreadMark) -> bool:
        """Bring a cached thread up to where the store stands: its missing tail, fresh layer states.
        False when only a reload can (another thread is active, or it was compacted or reset)."""
        if thread.id != mark.thread_id or thread.version != mark.version:
            return False
        if thread.layers_version != mark.layers_version:
            thread.layers.clear()  # read again from the store by each layer on its next use
            thread.layers_version = mark.layers_version
        if thread.id is not None and thread.next_seq < mark.next_seq:
            header, tail = await self._store.read_many(
                ThreadHeader(thread.conversation_key), MessagesPage(thread.id, thread.next_seq - 1, None)
            )
            thread.messages.extend(tail)
            thread.next_seq = header.next_seq
            thread.chars += sum(m.message.char_count() for m in tail)
            thread.last_input_tokens, thread.last_tokens_estimated = (
                header.last_input_tokens,
                header.last_tokens_estimated,
            )
        return True

    def peek(self, key: str) -> StoredThread | None:
        return self._threads.get(key)

    def put(self, thread: StoredThread) -> None:
        self._threads[thread.conversation_key] = thread
        self._threads.move_to_end(thread.conversation_key)
        while len(self._threads) > self._capacity:
            self._threads.popitem(last=False)

    def __len__(self) -> int:
        return len(self._threads)
