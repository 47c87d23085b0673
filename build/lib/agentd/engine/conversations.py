"""Per-conversation ordering and the in-memory hot threads.

One FIFO lock per conversation key: events of a conversation run one at a
time in arrival order, different conversations run concurrently. Hot threads
stay in memory (written through on every commit) so a turn never re-reads or
re-decodes a long history; the least recently used are dropped past a byte
budget shared by every agent (hot_cache.py) and reloaded when needed.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from agentd.engine.collector import collector_paused, loaded
from agentd.engine.hot_cache import HotBudget
from agentd.store.base import Store
from agentd.store.claims import KnownThread, ThreadMark, ThreadTail
from agentd.store.queries import MessagesPage, ThreadHeader
from agentd.store.records import StoredThread

# the seq of the oldest message a conversation's memory reads (Memory.tail_from, bound to its context)
Tail = Callable[[StoredThread], Awaitable[int]]


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

    def held(self, key: str) -> bool:
        """Whether an event of the conversation is running or waiting."""
        return key in self._locks

    def conversations_waiting(self) -> int:
        """Conversations with events queued behind the one being handled."""
        return sum(1 for holders in self._holders.values() if holders > 1)


class HotThreads:
    """The active threads of one agent's recently used conversations, under one byte budget with every
    other agent's (`HotBudget`: least recently used dropped first, never one in use).

    A thread not in memory is loaded in pages, each its own short job on the
    shared store thread, so loading one 10,000-message thread never stalls
    other agents' commits for the whole load. Concurrent loads of one key
    share a single load: two copies of a hot thread would silently diverge.

    Only what the conversation's memory reads is loaded and kept (`tail`, from
    the memory's `tail_from`: a window its last N messages, Σ what follows its
    cursor, a full transcript everything): pages are read from the end
    backwards until the memory has what it reads, and after each turn the
    thread is trimmed to that again (`trim`). A thread trimmed for one memory
    and then asked for by a wider one (a reload changed the strategy) loads
    its older messages again.
    """

    PAGE = 500
    FIRST_PAGE = 32  # a window or what follows a cursor is short: ask for little first

    def __init__(self, store: Store, budget: HotBudget, in_use: Callable[[str], bool] = lambda key: False):
        self._store = store
        self._budget = budget
        self._in_use = in_use
        self._threads: dict[str, StoredThread] = {}
        self._partial: set[str] = set()  # threads holding only a tail: older messages are in the store
        self._loading: dict[str, asyncio.Future[StoredThread]] = {}

    async def get(
        self,
        key: str,
        tail: Tail | None = None,
        mark: ThreadMark | None = None,
        missed: ThreadTail | None = None,
    ) -> StoredThread:
        """The conversation's hot thread, holding at least what `tail` says (None: every message);
        with `mark` (a shared store's claim), never a stale copy; `missed`, what the claim brought of
        the messages the copy lacked (see `known`)."""
        thread = self._threads.get(key)
        if thread is not None and mark is not None and not await self._catch_up(thread, mark, missed):
            self._budget.release(self, key)
            self.drop(key)
            thread = None
        if thread is not None and not await self._short(key, thread, tail):
            self._budget.hits += 1
            self._budget.charge(self, key, thread)
            return thread
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        self._budget.misses += 1
        future: asyncio.Future[StoredThread] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        held = len(thread.messages) if thread is not None else 0
        try:
            with collector_paused():
                thread = await self._fill(key, thread, tail)
                loaded(len(thread.messages) - held)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: a load nobody else awaited must not warn
            raise
        finally:
            del self._loading[key]
        self._threads[key] = thread
        self._budget.charge(self, key, thread)
        future.set_result(thread)
        return thread

    async def _short(self, key: str, thread: StoredThread, tail: Tail | None) -> bool:
        """Whether a trimmed thread lacks older messages that `tail` reads."""
        if key not in self._partial:
            return False
        need = 1 if tail is None else await tail(thread)
        return need < _held_from(thread)

    async def _fill(self, key: str, thread: StoredThread | None, tail: Tail | None) -> StoredThread:
        """Load the thread (or the older part of a trimmed one) backwards until `tail` is satisfied."""
        if thread is None:
            thread = await self._store.read(ThreadHeader(key))
            if thread.id is None:
                return thread
        thread_id = thread.id
        assert thread_id is not None
        complete = False
        while True:
            # asked again after every page: what a memory reads may depend on what it now sees
            need = 1 if tail is None else await tail(thread)
            held_from = _held_from(thread)
            complete = complete or held_from <= 1
            if complete or need >= held_from:
                break
            low = max(need, held_from - self.PAGE, 1)
            low = max(1, min(low, held_from - min(self.FIRST_PAGE, self.PAGE)))
            page = await self._store.read(MessagesPage(thread_id, low - 1, held_from - low))
            # a new list: a prompt being built over the old one (MessageSequence) keeps its snapshot
            thread.messages = page + thread.messages
            thread.chars += sum(m.message.char_count() for m in page)
            complete = len(page) < held_from - low  # fewer than asked: the older ones are compacted
        if complete:
            self._partial.discard(key)
        else:
            self._partial.add(key)
        self._drop_before(key, thread, need)
        return thread

    async def trim(self, key: str, tail: Tail | None) -> None:
        """After a turn (or after-run work): keep only what `tail` reads, and charge the new size."""
        thread = self._threads.get(key)
        if thread is None:
            return
        if tail is not None and thread.messages:
            self._drop_before(key, thread, await tail(thread))
        self._budget.charge(self, key, thread)

    def _drop_before(self, key: str, thread: StoredThread, seq: int) -> None:
        messages = thread.messages
        if not messages or seq <= messages[0].seq:
            return
        cut = bisect.bisect_left(messages, seq, key=lambda m: m.seq)
        thread.chars -= sum(m.message.char_count() for m in messages[:cut])
        thread.messages = messages[cut:]  # a new list, as above
        self._partial.add(key)

    async def _catch_up(self, thread: StoredThread, mark: ThreadMark, missed: ThreadTail | None) -> bool:
        """Bring a cached thread up to where the store stands: its missing tail, fresh layer states.
        False when only a reload can (another thread is active, or it was compacted or reset).

        The missing tail is the claim's (`missed`) when it starts where this copy ends; else (none
        sent, too long to send, or the copy moved since it was told) it is read here."""
        if thread.id != mark.thread_id or thread.version != mark.version:
            return False
        if thread.layers_version != mark.layers_version:
            thread.layers.clear()  # read again from the store by each layer on its next use
            thread.layers_version = mark.layers_version
        if thread.id is not None and thread.next_seq < mark.next_seq:
            if missed is None or missed.from_seq != thread.next_seq:
                missed = await self._read_missed(thread, thread.id)
            thread.append(missed.messages)  # (a turn of this process may have added some meanwhile)
            thread.next_seq = max(thread.next_seq, mark.next_seq)
            thread.last_input_tokens = missed.last_input_tokens
            thread.last_tokens_estimated = missed.last_tokens_estimated
        return True

    async def _read_missed(self, thread: StoredThread, thread_id: int) -> ThreadTail:
        """What a cached copy misses, read from the store (one round trip, one snapshot)."""
        header, page = await self._store.read_many(
            ThreadHeader(thread.conversation_key), MessagesPage(thread_id, thread.next_seq - 1, None)
        )
        return ThreadTail(
            thread.next_seq, tuple(page), header.last_input_tokens, header.last_tokens_estimated
        )

    def peek(self, key: str) -> StoredThread | None:
        return self._threads.get(key)

    def known(self, key: str) -> KnownThread | None:
        """Where the cached copy of the conversation's thread stands, for a claim to bring what it
        misses (None: no copy, or a thread not stored yet)."""
        thread = self._threads.get(key)
        if thread is None or thread.id is None:
            return None
        return KnownThread(thread.id, thread.version, thread.next_seq)

    def put(self, thread: StoredThread) -> None:
        """A thread that replaces the conversation's (a fresh one after /new)."""
        key = thread.conversation_key
        self._threads[key] = thread
        self._partial.discard(key)
        self._budget.charge(self, key, thread)

    # -- what the budget asks ---------------------------------------------------------------

    def in_use(self, key: str) -> bool:
        return self._in_use(key)

    def drop(self, key: str) -> None:
        self._threads.pop(key, None)
        self._partial.discard(key)

    def forget(self, key: str) -> None:
        """Drop the thread and its bytes from the budget: its next use reads it from the store."""
        self._budget.release(self, key)
        self.drop(key)

    def close(self) -> None:
        """Forget every thread (the agent is closing) and give their bytes back to the budget."""
        for key in list(self._threads):
            self._budget.release(self, key)
            self.drop(key)

    def __len__(self) -> int:
        return len(self._threads)


def _held_from(thread: StoredThread) -> int:
    """The seq of the first message held (the next one's when none is)."""
    return thread.messages[0].seq if thread.messages else thread.next_seq
