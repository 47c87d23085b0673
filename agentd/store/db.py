"""One SQLite connection per agent file, all of them served by one shared store thread.

Why one thread: on a 2-core machine a thread per connection (aiosqlite's
model) convoys on the GIL; measured in performance.md, one shared worker is
the fastest layout. Every connection is used only from that thread, so no
locks of our own guard it.

Writes are group-committed: each `write(job)` is queued; the store thread
takes every job queued for that file, runs each inside its own SAVEPOINT
(a failing job is rolled back alone), and commits once. Under load many
turns share one commit (and one fsync with synchronous=FULL); a lone turn
costs one thread hop and one commit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from agentd.errors import StoreError
from agentd.store.migrations import migrate

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]
Outcome = tuple["asyncio.Future[Any]", Any, "BaseException | None"]
log = logging.getLogger(__name__)


class StoreExecutor:
    """The one thread every agent file's SQL runs on, and the queue of files with writes waiting.

    Writes of all files are drained together: one job on the store thread
    commits each waiting file's batch (one transaction per file) and wakes the
    event loop once for all of them. With a hundred busy files a wake-up per
    file would cost more than the commits themselves (performance.md, G5).
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentd-store")
        self._lock = threading.Lock()
        self._dirty: list[AgentStore] = []
        self._drain_scheduled = False

    def submit(self, fn: Callable[[], None]) -> None:
        self._pool.submit(fn)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def enqueue_write(self, store: AgentStore, job: Job, future: asyncio.Future[Any]) -> None:
        with self._lock:
            store._pending.append((job, future))
            if not store._queued:
                store._queued = True
                self._dirty.append(store)
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
            for store in dirty:
                store._queued = False
                batches.append((store, store._pending))
                store._pending = []
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for store, batch in batches:
            if batch and store._loop is not None:
                by_loop.setdefault(store._loop, []).extend(store._commit_batch(batch))
        for loop, outcomes in by_loop.items():
            loop.call_soon_threadsafe(_resolve, outcomes)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def connect(path: Path, synchronous: str = "normal") -> sqlite3.Connection:
    """Open (creating with mode 0600) and configure one agent file; autocommit mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Create the file ourselves so it is never world-readable, even for a moment.
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    os.chmod(path, 0o600)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'full' else 'NORMAL'}")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA foreign_keys=ON")
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, 0o600)
    return conn


class AgentStore:
    """The SQLite file of one agent: `read(job)` and group-committed `write(job)`.

    A job is a plain function of the connection; all SQL lives in this
    package's modules, which provide those functions.
    """

    def __init__(self, path: Path, executor: StoreExecutor, synchronous: str = "normal"):
        self.path = path
        self._executor = executor
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        # guarded by the executor's lock: writes waiting, and whether this file is queued to drain
        self._pending: list[tuple[Job, asyncio.Future[Any]]] = []
        self._queued = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def open(self) -> list[str]:
        """Open, configure and migrate the file; returns the migrations applied now."""
        self._loop = asyncio.get_running_loop()

        def _open() -> list[str]:
            try:
                self._conn = connect(self.path, self._synchronous)
                return migrate(self._conn)
            except sqlite3.Error as e:
                raise StoreError(f"cannot open {self.path}: {e}") from e

        return await self._executor.call(_open)

    async def close(self) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None

        def _close() -> None:
            try:
                conn.execute("PRAGMA optimize")
            finally:
                conn.close()

        await self._executor.call(_close)

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.path} is not open")
        return self._conn

    async def read(self, job: Callable[[sqlite3.Connection], T]) -> T:
        def _read() -> T:
            try:
                return job(self._require())
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: {e}") from e

        return await self._executor.call(_read)

    async def write(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run `job` in a transaction; returns once it is committed (possibly with others)."""
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._executor.enqueue_write(self, job, future)
        return await future

    def _commit_batch(self, batch: list[tuple[Job, asyncio.Future[Any]]]) -> list[Outcome]:
        """On the store thread: run each job in its own SAVEPOINT (a failing job is rolled
        back alone) inside one transaction, and commit once."""
        if len(batch) == 1:
            return [self._commit_one(*batch[0])]
        outcomes: list[Outcome] = []
        try:
            conn = self._require()
            conn.execute("BEGIN IMMEDIATE")
            for job, future in batch:
                conn.execute("SAVEPOINT job")
                try:
                    result = job(conn)
                except Exception as e:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    outcomes.append((future, None, _as_store_error(self.path, e)))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((future, result, None))
            conn.execute("COMMIT")
        except Exception as e:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            err = _as_store_error(self.path, e)
            outcomes = [(future, None, err) for _, future in batch]
        return outcomes

    def _commit_one(self, job: Job, future: asyncio.Future[Any]) -> Outcome:
        """A lone job needs no savepoint: its transaction is its own."""
        try:
            conn = self._require()
            conn.execute("BEGIN IMMEDIATE")
            result = job(conn)
            conn.execute("COMMIT")
            return (future, result, None)
        except Exception as e:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            return (future, None, _as_store_error(self.path, e))


def _as_store_error(path: Path, e: Exception) -> Exception:
    if isinstance(e, sqlite3.Error):
        return StoreError(f"{path}: {e}")
    return e


def _resolve(outcomes: list[Outcome]) -> None:
    for future, result, error in outcomes:
        if future.done():  # the waiting task was cancelled; the write still happened
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
