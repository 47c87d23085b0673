"""The one thread every agent file's SQL runs on, and group commit across files.

Why one thread: on a 2-core machine a thread per connection (aiosqlite's
model) convoys on the GIL; measured in performance.md, one shared worker is
the fastest layout. Every connection is used only from that thread, so no
locks of our own guard it.

Writes are group-committed: each `write(ops)` is queued; the store thread
takes every batch queued for a file, runs each inside its own SAVEPOINT (a
failing batch is rolled back alone), and commits once. Under load many turns
share one commit (and one fsync with synchronous=FULL); a lone turn costs one
thread hop and one commit. Writes of all files are drained together: one job
on the store thread commits each waiting file's batches and wakes the event
loop once for all of them. With a hundred busy files a wake-up per file would
cost more than the commits themselves (performance.md, G5).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from agentd.store.sqlite.files import OpenFiles

T = TypeVar("T")
Outcome = tuple["asyncio.Future[Any]", Any, "BaseException | None"]


class BatchTarget(Protocol):
    """A file with writes waiting (the SQLite store): its queue, and how to commit what was queued."""

    _pending: list[tuple[Any, asyncio.Future[Any]]]
    _queued: bool
    _loop: asyncio.AbstractEventLoop | None

    def _commit_batch(self, batch: list[tuple[Any, asyncio.Future[Any]]]) -> list[Outcome]: ...


class StoreExecutor:
    """The store thread, the queue of files with writes waiting, and the files open (`files`)."""

    def __init__(self, max_open_files: int = 256, close_idle_after_s: float = 60.0) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentd-store")
        # the connections live here because this thread is the only one that uses them
        self.files = OpenFiles(max_open_files, close_idle_after_s)
        self._lock = threading.Lock()
        self._dirty: list[BatchTarget] = []
        self._drain_scheduled = False
        # told each file's group-commit time, on this thread (the daemon's metrics)
        self.on_commit: Callable[[float], None] | None = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def enqueue_write(self, target: BatchTarget, job: Any, future: asyncio.Future[Any]) -> None:
        with self._lock:
            target._pending.append((job, future))
            if not target._queued:
                target._queued = True
                self._dirty.append(target)
            schedule = not self._drain_scheduled
            self._drain_scheduled = True
        if schedule:
            self._pool.submit(self._drain)

    def _drain(self) -> None:
        """On the store thread: commit every waiting file's batch, then wake each loop once."""
        with self._lock:
            dirty, self._dirty = self._dirty, []
            self._drain_scheduled = False
            batches = []
            for target in dirty:
                target._queued = False
                batches.append((target, target._pending))
                target._pending = []
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for target, batch in batches:
            if batch and target._loop is not None:
                started = time.perf_counter()
                by_loop.setdefault(target._loop, []).extend(target._commit_batch(batch))
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - started)
        for loop, outcomes in by_loop.items():
            loop.call_soon_threadsafe(_resolve, outcomes)

    async def close_idle_files(self) -> int:
        """Close the files unused for a while (they reopen on their next use); returns how many."""
        return await self.call(self.files.close_idle)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def _resolve(outcomes: list[Outcome]) -> None:
    for future, result, error in outcomes:
        if future.done():  # the waiting task was cancelled; the write still happened
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
