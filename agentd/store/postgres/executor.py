"""A few threads, one psycopg connection each: where every statement of the PostgreSQL store runs.

Why threads and sync connections: bench/README.md ("pg_drivers.py") measured psycopg 3's sync
connections on a small thread pool, in pipeline mode, as the lowest sequential latency and as fast as
asyncpg under load; it is also the SQLite store's shape, one hop onto a small shared executor per read
or write. A thread waits on the network, not the GIL, so a few of them serve many agents.

`read` and `write` run a batch in one pipeline: every statement is sent, then one sync, so a batch
is one round trip however many statements it has (a handler that needs a row mid-batch adds one).
Transactions are BEGIN/COMMIT sent by hand inside the pipeline: psycopg's `transaction()` syncs when
it starts and ends (5 round trips where 1 does). A connection left mid-transaction by an error is
rolled back before its thread takes the next job; a broken one is dropped and replaced.

Every job has a deadline (`deadline_s`, the lease time by default; agentd/store/postgres/deadlines.py).
A connection that died while idle (the server restarted, a proxy dropped it) is noticed before a job
is sent on it (its socket is readable: the server's goodbye or EOF) and replaced, so a write is never
lost to a connection that was already dead; connecting again is retried briefly (a restart takes a
fraction of a second) within the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from agentd.errors import StoreError
from agentd.store.claims import Fence
from agentd.store.postgres.claim_fence_sql import CHECK_FENCE
from agentd.store.postgres.connection import Pooler, as_store_error, connect_measured, unavailable
from agentd.store.postgres.deadlines import Watchdog, grace
from agentd.store.postgres.dispatch import Cx, apply, one_statement, reads_midway, resolve
from agentd.store.writes import AppendAudit

T = TypeVar("T")
# Commits wait on the server's WAL flush, not on the GIL: with 100 conversations in flight, 8 threads
# let more commits share a flush. bench/replicas.py's in-process cell, 6 interleaved pairs on the shared
# 2-core machine: 8 threads 1.0-1.6x the turns/s of 4 (median 1.25x) at 5-15 % less CPU per turn;
# bench/pg_drivers.py found the same peak for psycopg sync.
DEFAULT_THREADS = 8
# a snapshot for every query of a read, so several queries answered in one hop agree with each other
READ_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
DEFAULT_DEADLINE_S = 15.0
RECONNECT_FOR_S = 2.0  # connecting is retried this long at most (within the deadline)
RECONNECT_PAUSE_S = 0.05  # then doubling


class PgExecutor:
    """The threads and their connections (made on first use, remade after a failure)."""

    def __init__(
        self,
        url: str,
        label: str,
        threads: int = DEFAULT_THREADS,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        pooler: Pooler = "none",
    ):
        self.url = url
        self.label = label
        self.deadline_s = deadline_s
        self.pooler = pooler
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agentd-pg")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: set[psycopg.Connection[Any]] = set()
        self._watchdog = Watchdog()
        # told each committed write's time on its thread, from its first statement sent to its commit
        # answered (the daemon's store commit metric, as the SQLite executor's group commits)
        self.on_commit: Callable[[float], None] | None = None

    async def call(
        self,
        job: Callable[[psycopg.Connection[Any]], T],
        *,
        idempotent: bool = False,
        bounded: bool = True,
    ) -> T:
        """Run `job(connection)` on one of the threads; PostgreSQL errors arrive as StoreErrors. An
        `idempotent` job (a read) is tried once more on a new connection when its connection broke
        (the server restarted, a proxy dropped it): a write is not, it may have committed. A job not
        `bounded` has no deadline (migrations: they may wait for another daemon's)."""
        run = self._run_again_if_broken if idempotent else self._run
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, run, job, bounded, time.monotonic())

    async def commit(self, job: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`call` for a write batch, timed for `on_commit` once it has committed."""

        def timed(conn: psycopg.Connection[Any]) -> T:
            started = time.perf_counter()
            result = job(conn)
            if self.on_commit is not None:
                self.on_commit(time.perf_counter() - started)
            return result

        return await self.call(timed)

    def submit(self, job: Callable[[psycopg.Connection[Any]], T]) -> asyncio.Future[T]:
        """`call` as a future that runs to the end even if whoever awaits it is cancelled."""
        return asyncio.get_running_loop().run_in_executor(self._pool, self._run, job, True, time.monotonic())

    def server_deadline(self) -> float | None:
        """Inside a job: its deadline in the server's clock (epoch seconds), for agentd_check_fence."""
        return getattr(self._local, "server_deadline", None)

    def _run(
        self,
        job: Callable[[psycopg.Connection[Any]], T],
        bounded: bool = True,
        queued_at: float | None = None,
    ) -> T:
        """Run the job on this thread's connection. Its deadline counts from when it was handed to
        the pool (`queued_at`): behind a stalled database every thread waits out its own job, and the
        jobs queued behind them must not wait a deadline each."""
        started = time.monotonic() if queued_at is None else queued_at
        if bounded and time.monotonic() - started >= self.deadline_s:
            raise self._no_answer("(every connection was busy waiting on the database)")
        conn = self._connection(started)
        if not bounded:
            return self._run_unbounded(conn, job)
        remaining = self.deadline_s - (time.monotonic() - started)
        self._local.server_deadline = time.time() + self._local.clock_offset + remaining
        watch = self._watchdog.arm(conn, remaining + grace(self.deadline_s))
        try:
            return job(conn)
        except psycopg.Error as e:
            cut = self._watchdog.disarm(watch)
            self._after_failure(conn)
            if cut:
                raise self._no_answer(
                    "(the database or the network to it stalled); a write was either committed in time "
                    "or refused, never later"
                ) from e
            raise as_store_error(self.label, e) from e
        except BaseException:  # an op that refused (RowMissing): its batch is rolled back
            self._after_failure(conn)
            raise
        finally:
            self._watchdog.disarm(watch)
            self._local.server_deadline = None

    def _no_answer(self, why: str) -> StoreError:
        detail = f"no answer within {self.deadline_s:g}s"
        return unavailable(self.label, f"{detail} {why}", detail)

    def _run_unbounded(self, conn: psycopg.Connection[Any], job: Callable[[psycopg.Connection[Any]], T]) -> T:
        try:
            if self.pooler != "transaction":
                conn.execute("SET statement_timeout = 0")
            try:
                return job(conn)
            finally:
                if self.pooler != "transaction" and not conn.broken:
                    conn.execute("SELECT set_config('statement_timeout', %s, false)", (_ms(self.deadline_s),))
        except psycopg.Error as e:
            self._after_failure(conn)
            raise as_store_error(self.label, e) from e
        except BaseException:
            self._after_failure(conn)
            raise

    def _run_again_if_broken(
        self,
        job: Callable[[psycopg.Connection[Any]], T],
        bounded: bool = True,
        queued_at: float | None = None,
    ) -> T:
        try:
            return self._run(job, bounded, queued_at)
        except StoreError as e:
            if not isinstance(e.__cause__, psycopg.OperationalError) or getattr(self._local, "conn", None):
                raise
            # (the broken connection was dropped: this one is new; within the same deadline)
            return self._run(job, bounded, queued_at)

    def _connection(self, started: float) -> psycopg.Connection[Any]:
        """This thread's connection: the one it has unless that died while idle, else a new one."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            if not _hung_up(conn):
                return conn
            self._drop(conn)  # (nothing was sent on it: whatever comes next cannot have committed)
        pause = RECONNECT_PAUSE_S
        while True:
            try:
                conn, self._local.clock_offset = connect_measured(self.url, self.pooler, self.deadline_s)
                break
            except psycopg.OperationalError as e:
                waited = time.monotonic() - started
                if waited + pause > min(RECONNECT_FOR_S, self.deadline_s):
                    raise as_store_error(self.label, e) from e
                time.sleep(pause)  # (the server may be restarting: it answers in a fraction of a second)
                pause *= 2
            except psycopg.Error as e:
                raise as_store_error(self.label, e) from e
        self._local.conn = conn
        with self._lock:
            self._connections.add(conn)
        return conn

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            self._connections.discard(conn)
        conn.close()
        self._local.conn = None

    def _after_failure(self, conn: psycopg.Connection[Any]) -> None:
        """Leave the connection ready for the next job: out of any transaction, or gone if broken."""
        try:
            if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            pass
        if conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
            self._drop(conn)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._watchdog.close()
        with self._lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            conn.close()


def _ms(seconds: float) -> str:
    return str(int(seconds * 1000))


def _hung_up(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has something to read: between jobs it has nothing to say unless
    the server said goodbye (a shutdown's FATAL, then EOF) or the connection was reset."""
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, psycopg.Error):
        return True


def read_batch(conn: psycopg.Connection[Any], agent_id: int, queries: Sequence[Any]) -> list[Any]:
    """Answer the queries in one round trip and one snapshot (a lone statement is its own)."""
    cx = Cx(conn, agent_id)
    several = not one_statement(queries)
    with conn.pipeline():
        if several:
            conn.execute(READ_BEGIN)
        answers = [apply(cx, q) for q in queries]
        if several:
            conn.execute("COMMIT")
    return resolve(answers)


def write_batch(
    conn: psycopg.Connection[Any],
    agent_id: int,
    ops: Sequence[Any],
    fence: Fence | None,
    *,
    holder: str = "",
    deadline: float | None = None,
) -> list[Any]:
    """Apply the ops in one transaction, the fence checked first; one round trip unless an op reads.

    Statements pipelined up to one sync run as one implicit transaction (an error in any rolls them
    all back), so a batch that reads nothing before its end needs no BEGIN and COMMIT; one that does
    (reading syncs) is an explicit transaction. An op that refuses, or a bug, queues a ROLLBACK so
    what is already sent never commits with the sync. The fence is this daemon's (`holder`) ticket; a
    fenced batch that reaches the server after `deadline` (the server's clock,
    PgExecutor.server_deadline) is refused.
    """
    cx = Cx(conn, agent_id)
    explicit = reads_midway(ops)
    with conn.pipeline():
        if explicit:
            conn.execute("BEGIN")
        try:
            if fence is not None:
                # Locks the lease's row (FOR KEY SHARE) to the end: a takeover waits for this batch.
                args = (fence.token, agent_id, fence.conversation_key, holder, deadline)
                conn.execute(CHECK_FENCE, args)
            answers = [apply(cx, op) for op in audit_last(ops)]
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
            raise
        if explicit:
            conn.execute("COMMIT")
    return in_given_order(ops, resolve(answers))


def _appends(op: Any) -> bool:
    return isinstance(op, AppendAudit)


def audit_last(ops: Sequence[Any]) -> list[Any]:
    """The batch with its audit appends moved to the end (their result is None, and nothing else in
    a batch reads the trail). An append locks its chain's head row until the commit: taken last in
    every batch, that lock is never held while waiting for another row, so two daemons' batches of
    one agent cannot wait on each other in a circle, and it is held the shortest time."""
    return [op for op in ops if not _appends(op)] + [op for op in ops if _appends(op)]


def in_given_order(ops: Sequence[Any], answers: list[Any]) -> list[Any]:
    """The answers of `audit_last(ops)` put back in the order of `ops`."""
    order = [i for i, op in enumerate(ops) if not _appends(op)] + [
        i for i, op in enumerate(ops) if _appends(op)
    ]
    out: list[Any] = [None] * len(ops)
    for i, answer in zip(order, answers, strict=True):
        out[i] = answer
    return out
