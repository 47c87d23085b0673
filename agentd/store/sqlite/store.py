"""One agent's SQLite file behind the store seam: queries and writes answered on the store thread."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from agentd.errors import NotStored, StoreError
from agentd.store.claims import Claim, KnownThread
from agentd.store.queries import Query
from agentd.store.sqlite.dispatch import apply
from agentd.store.sqlite.executor import Outcome, StoreExecutor
from agentd.store.sqlite.migrations import migrate
from agentd.store.writes import ErasePerson, Write, stamped

T = TypeVar("T")
Batch = Sequence[Write[Any]]
NO_CLAIM = Claim()
# writes after whose commit the log is checkpointed and truncated: no page image of what they
# deleted stays in the WAL file
_SCRUBBING = (ErasePerson,)


def connect(path: Path, synchronous: str = "normal", *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating with mode 0600) and configure one agent file; autocommit mode."""
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA busy_timeout=5000")
        return conn
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
    # deleted means gone: what a delete or an update frees is overwritten with zeros, not left in free
    # pages (a person's data erased on request, a conversation deleted, episodes past retention)
    conn.execute("PRAGMA secure_delete=ON")
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, 0o600)
    return conn


class SqliteStore:
    """The SQLite file of one agent: `read(query)` on the store thread, group-committed `write(*ops)`.

    The file is opened (created, migrated) at its first read or write, not by
    `open()`, and may be closed between uses by the executor's `OpenFiles`: an
    idle agent holds no descriptor, and a daemon with thousands of agents starts
    without touching their files. A file that cannot be opened (written by a
    newer agentd, out of descriptors) fails the call that needed it.
    """

    def __init__(
        self,
        path: Path,
        executor: StoreExecutor,
        synchronous: str = "normal",
        *,
        readonly: bool = False,
        daemon: str | None = None,
    ):
        self.path = path
        self.daemon = daemon  # recorded on every run and audit event this store writes
        self._executor = executor
        self._synchronous = synchronous
        self._readonly = readonly
        self._conn: sqlite3.Connection | None = None  # set and cleared by executor.files, on its thread
        self._migrated = False  # migrated (or checked) once by this process: reopening skips it
        # guarded by the executor's lock: batches waiting, and whether this file is queued to drain
        self._pending: list[tuple[Batch, asyncio.Future[Any]]] = []
        self._queued = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def label(self) -> str:
        return str(self.path)

    # One daemon owns a data folder (its lock file says so): nobody else writes this file, so the
    # process's own per-conversation lock is the whole claim and the caches need no check.
    shared = False

    def claim(
        self, conversation_key: str, purpose: str = "turn", known: KnownThread | None = None
    ) -> AbstractAsyncContextManager[Claim]:
        return nullcontext(NO_CLAIM)

    def absent(self) -> bool:
        """Whether nothing was ever stored: no file yet (reads can be answered without creating it)."""
        return self._conn is None and not self.path.exists()

    async def open(self) -> list[str]:
        """Ready the store; the file itself is opened and migrated at its first use (returns [])."""
        self._loop = asyncio.get_running_loop()
        if self._readonly and not self.path.exists():
            raise NotStored(f"no data file {self.path}")
        return []

    def _connect(self) -> sqlite3.Connection:
        """On the store thread, for executor.files: open and configure the file; migrate it the first time."""
        if self._readonly:
            if not self.path.exists():
                raise StoreError(f"no data file {self.path}")
            return connect(self.path, readonly=True)
        conn = connect(self.path, self._synchronous)
        if not self._migrated:
            try:
                migrate(conn)
            except BaseException:
                conn.close()
                raise
            self._migrated = True
        return conn

    async def close(self) -> None:
        if self._conn is None:
            return
        files, readonly = self._executor.files, self._readonly
        await self._executor.call(lambda: files.close(self, optimize=not readonly))

    def _require(self) -> sqlite3.Connection:
        """On the store thread: the open connection, opening the file if needed."""
        try:
            return self._executor.files.connection(self)
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open {self.path}: {e}") from e

    async def read_with(self, job: Callable[[sqlite3.Connection], T]) -> T:
        def _read() -> T:
            try:
                return job(self._require())
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: {e}") from e

        return await self._executor.call(_read)

    async def read(self, query: Query[T]) -> T:
        result: T = await self.read_with(lambda conn: apply(conn, query))
        return result

    async def read_many(self, *queries: Query[Any]) -> list[Any]:
        return await self.read_with(lambda conn: [apply(conn, q) for q in queries])

    async def write(self, *ops: Write[Any]) -> list[Any]:
        """Apply `ops` in one transaction; returns their results once committed (possibly with others)."""
        if self._readonly:
            raise StoreError(f"{self.path} is open read-only")
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._executor.enqueue_write(self, stamped(ops, self.daemon), future)
        return await future

    def _commit_batch(self, batch: list[tuple[Batch, asyncio.Future[Any]]]) -> list[Outcome]:
        """On the store thread: each write batch in its own SAVEPOINT (a failing one is rolled back
        alone) inside one transaction, committed once."""
        if len(batch) == 1:
            return [self._commit_one(*batch[0])]
        outcomes: list[Outcome] = []
        try:
            conn = self._require()
            conn.execute("BEGIN IMMEDIATE")
            for ops, future in batch:
                conn.execute("SAVEPOINT job")
                try:
                    result = [apply(conn, op) for op in ops]
                except Exception as e:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    outcomes.append((future, None, _as_store_error(self.path, e)))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((future, result, None))
            conn.execute("COMMIT")
        except Exception as e:
            self._rollback()
            err = _as_store_error(self.path, e)
            outcomes = [(future, None, err) for _, future in batch]
        else:
            self._scrub_log(conn, [op for ops, _ in batch for op in ops])
        return outcomes

    def _commit_one(self, ops: Batch, future: asyncio.Future[Any]) -> Outcome:
        """A lone batch needs no savepoint: its transaction is its own."""
        try:
            conn = self._require()
            conn.execute("BEGIN IMMEDIATE")
            result = [apply(conn, op) for op in ops]
            conn.execute("COMMIT")
        except Exception as e:
            self._rollback()
            return (future, None, _as_store_error(self.path, e))
        self._scrub_log(conn, ops)
        return (future, result, None)

    def _scrub_log(self, conn: sqlite3.Connection, ops: Batch) -> None:
        """After an erasure: checkpoint the WAL into the file and truncate it, so the erased rows'
        old page images do not linger in the log. A reader holding an old snapshot can keep the
        checkpoint from finishing; the next one (SQLite's own, or the next erasure) does."""
        if any(isinstance(op, _SCRUBBING) for op in ops):
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass  # committed already: the erasure stands whatever the checkpoint does

    def _rollback(self) -> None:
        if self._conn is not None and self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


def _as_store_error(path: Path, e: Exception) -> Exception:
    if isinstance(e, sqlite3.Error):
        return StoreError(f"{path}: {e}")
    return e


class SoleOwner:
    """Leases on a single-owner store: this daemon owns the data folder (its lock file), so it holds
    every lease there is."""

    def __init__(self, holder: str):
        self._holder = holder

    async def acquire(self, name: str, holder: str, ttl: float) -> int | None:
        return 1

    async def renew(self, name: str, holder: str, token: int, ttl: float) -> bool:
        return True

    async def release(self, name: str, holder: str, token: int) -> None:
        return None

    async def holder(self, name: str) -> str | None:
        return self._holder
