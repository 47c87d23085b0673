"""The turn path's schema and one turn on each PostgreSQL driver, for bench/pg_drivers.py.

A turn is one transaction of five statements:
  1. check the fence:   SELECT fence FROM conversation_leases WHERE thread_id = $1 FOR SHARE
                        (must equal the fence this daemon holds; FOR SHARE makes a takeover wait)
  2. read the version:  SELECT version FROM threads WHERE id = $1 (must equal the cached version)
  3. insert 2 messages: one INSERT with two rows (user message and reply, ~400 characters of JSON each)
  4. insert a run:      INSERT INTO runs (...) VALUES (...)
  5. bump the version:  UPDATE threads SET version = version + 1, updated_at = now() WHERE id = $1
between BEGIN and COMMIT: 7 round trips, or 2 in psycopg's pipeline mode (BEGIN and both checks, then
the writes and COMMIT). A plain turn writes no audit row (as in agentd), so `audit` is only there.

Run on its own, it checks each driver's turn against a throwaway server (testkit.postgres) and says
how long one takes, one conversation per driver, one after another; bench/pg_drivers.py is the
measurement (interleaved blocks, concurrency, pgbench as the floor):

    python bench/pg_turn.py [--turns 200]
    python bench/pg_turn.py --quick    # smoke run: 20 turns per driver
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import _common  # noqa: F401  (bench/_common.py: first, it puts the repository root on the path)
import asyncpg
import psycopg
import psycopg_pool

SCHEMA = """
CREATE TABLE threads (
    id bigint PRIMARY KEY,
    conversation_key text NOT NULL UNIQUE,
    version bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE messages (
    thread_id bigint NOT NULL REFERENCES threads (id),
    seq bigint NOT NULL,
    role text NOT NULL,
    body jsonb NOT NULL,
    run_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (thread_id, seq)
);
CREATE TABLE runs (
    id text PRIMARY KEY,
    thread_id bigint NOT NULL REFERENCES threads (id),
    status text NOT NULL,
    input_tokens integer NOT NULL,
    output_tokens integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_by_thread ON runs (thread_id, started_at);
CREATE TABLE audit (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL,
    data jsonb NOT NULL DEFAULT '{}'
);
CREATE TABLE conversation_leases (
    thread_id bigint PRIMARY KEY REFERENCES threads (id),
    holder text NOT NULL,
    fence bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
"""

# Each $n appears once and in order, so psycopg's form is the same text with %s.
FENCE = "SELECT fence FROM conversation_leases WHERE thread_id = $1 FOR SHARE"
VERSION = "SELECT version FROM threads WHERE id = $1"
MESSAGES = (
    "INSERT INTO messages (thread_id, seq, role, body, run_id) "
    "VALUES ($1, $2, 'user', $3, $4), ($5, $6, 'assistant', $7, $8)"
)
RUN = "INSERT INTO runs (id, thread_id, status, input_tokens, output_tokens) VALUES ($1, $2, 'ok', $3, $4)"
BUMP = "UPDATE threads SET version = version + 1, updated_at = now() WHERE id = $1"
P_FENCE, P_VERSION, P_MESSAGES, P_RUN, P_BUMP = (
    re.sub(r"\$\d+", "%s", sql) for sql in (FENCE, VERSION, MESSAGES, RUN, BUMP)
)


def body(rng: random.Random, role: str) -> str:
    """A message as agentd stores it (kind-tagged JSON), ~400 characters of text."""
    words = " ".join(f"word{rng.randrange(10_000)}" for _ in range(48))[:400]
    return json.dumps({"role": role, "parts": [{"kind": "text", "text": words}]})


@dataclass
class Conversation:
    """What a daemon holding this conversation has cached: its fence, the thread version, the next seq."""

    thread_id: int
    fence: int = 1
    version: int = 0
    next_seq: int = 1

    def check(self, fence: Any, stored_version: Any) -> None:
        if fence != self.fence or stored_version != self.version:
            raise RuntimeError(
                f"thread {self.thread_id}: fence {fence} (ours {self.fence}), "
                f"version {stored_version} (cached {self.version})"
            )

    def writes(self, user: str, reply: str) -> tuple[list[Any], list[Any], list[Any]]:
        """Parameters for MESSAGES, RUN and BUMP; advances the cached seq and version."""
        run_id = uuid.uuid4().hex
        seq = self.next_seq
        self.next_seq += 2
        self.version += 1
        messages = [self.thread_id, seq, user, run_id, self.thread_id, seq + 1, reply, run_id]
        return messages, [run_id, self.thread_id, 120, 80], [self.thread_id]


def first(row: Any) -> Any:
    return None if row is None else row[0]


Turn = Callable[[Conversation], Awaitable[None]]


@dataclass(frozen=True)
class Driver:
    name: str
    kind: str  # asyncpg | psycopg-async | psycopg-sync
    pipeline: bool = False
    pool_reset: bool = False  # asyncpg: run its default reset query on every release to the pool
    round_trips: int = 7

    def label(self, size: int) -> str:
        return f"{self.name} ({'threads' if self.kind == 'psycopg-sync' else 'pool'} {size})"


DRIVERS = [
    Driver("asyncpg", "asyncpg"),
    Driver("asyncpg, default pool reset", "asyncpg", pool_reset=True, round_trips=8),
    Driver("psycopg async", "psycopg-async"),
    Driver("psycopg async, pipeline", "psycopg-async", pipeline=True, round_trips=2),
    Driver("psycopg sync on threads", "psycopg-sync"),
    Driver("psycopg sync on threads, pipeline", "psycopg-sync", pipeline=True, round_trips=2),
]


# -- asyncpg ---------------------------------------------------------------------------------------


async def _no_reset(conn: asyncpg.Connection) -> None:
    """agentd sets no session state on pooled connections (no SET, LISTEN, session locks, cursors)."""


def asyncpg_turn(pool: asyncpg.Pool, user: str, reply: str) -> Turn:
    async def turn(conv: Conversation) -> None:
        async with pool.acquire() as conn, conn.transaction():
            conv.check(
                await conn.fetchval(FENCE, conv.thread_id), await conn.fetchval(VERSION, conv.thread_id)
            )
            messages, run, bump = conv.writes(user, reply)
            await conn.execute(MESSAGES, *messages)
            await conn.execute(RUN, *run)
            await conn.execute(BUMP, *bump)

    return turn


# -- psycopg 3, async ------------------------------------------------------------------------------


async def _psycopg_async_statements(
    conn: psycopg.AsyncConnection, conv: Conversation, user: str, reply: str
) -> None:
    async with conn.transaction():
        fence = await conn.execute(P_FENCE, [conv.thread_id])
        stored = await conn.execute(P_VERSION, [conv.thread_id])
        conv.check(first(await fence.fetchone()), first(await stored.fetchone()))
        messages, run, bump = conv.writes(user, reply)
        await conn.execute(P_MESSAGES, messages)
        await conn.execute(P_RUN, run)
        await conn.execute(P_BUMP, bump)


async def _psycopg_async_pipelined(
    conn: psycopg.AsyncConnection, conv: Conversation, user: str, reply: str
) -> None:
    # BEGIN/COMMIT by hand: psycopg's transaction() block syncs the pipeline when it starts and when it
    # ends, which makes 5 round trips of the 2 this needs (seen in a libpq trace).
    async with conn.pipeline():
        await conn.execute("BEGIN")
        fence = await conn.execute(P_FENCE, [conv.thread_id])
        stored = await conn.execute(P_VERSION, [conv.thread_id])
        try:
            conv.check(first(await fence.fetchone()), first(await stored.fetchone()))  # round trip 1
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        messages, run, bump = conv.writes(user, reply)
        await conn.execute(P_MESSAGES, messages)
        await conn.execute(P_RUN, run)
        await conn.execute(P_BUMP, bump)
        await conn.execute("COMMIT")
    # round trip 2 when the pipeline block ends


def psycopg_async_turn(pool: psycopg_pool.AsyncConnectionPool, user: str, reply: str, pipeline: bool) -> Turn:
    statements = _psycopg_async_pipelined if pipeline else _psycopg_async_statements

    async def turn(conv: Conversation) -> None:
        async with pool.connection() as conn:
            await statements(conn, conv, user, reply)

    return turn


# -- psycopg 3, sync on a thread pool --------------------------------------------------------------


def _psycopg_sync_statements(conn: psycopg.Connection, conv: Conversation, user: str, reply: str) -> None:
    with conn.transaction():
        fence = conn.execute(P_FENCE, [conv.thread_id])
        stored = conn.execute(P_VERSION, [conv.thread_id])
        conv.check(first(fence.fetchone()), first(stored.fetchone()))
        messages, run, bump = conv.writes(user, reply)
        conn.execute(P_MESSAGES, messages)
        conn.execute(P_RUN, run)
        conn.execute(P_BUMP, bump)


def _psycopg_sync_pipelined(conn: psycopg.Connection, conv: Conversation, user: str, reply: str) -> None:
    # the same two round trips as _psycopg_async_pipelined, and for the same reason without transaction()
    with conn.pipeline():
        conn.execute("BEGIN")
        fence = conn.execute(P_FENCE, [conv.thread_id])
        stored = conn.execute(P_VERSION, [conv.thread_id])
        try:
            conv.check(first(fence.fetchone()), first(stored.fetchone()))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        messages, run, bump = conv.writes(user, reply)
        conn.execute(P_MESSAGES, messages)
        conn.execute(P_RUN, run)
        conn.execute(P_BUMP, bump)
        conn.execute("COMMIT")


class ThreadedPsycopg:
    """psycopg 3 sync on a small thread pool, one connection per thread: agentd's store-executor shape.

    Each turn is one hop from the event loop onto the pool (run_in_executor), as the daemon's are.
    """

    def __init__(self, url: str, threads: int, pipeline: bool):
        self.url = url
        self.statements = _psycopg_sync_pipelined if pipeline else _psycopg_sync_statements
        self.local = threading.local()
        self.connections: list[psycopg.Connection] = []
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="pg")

    def _turn(self, conv: Conversation, user: str, reply: str) -> None:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = psycopg.connect(self.url, autocommit=True)
            self.connections.append(conn)
        self.statements(conn, conv, user, reply)

    def turn(self, user: str, reply: str) -> Turn:
        async def turn(conv: Conversation) -> None:
            await asyncio.get_running_loop().run_in_executor(self.executor, self._turn, conv, user, reply)

        return turn

    def close(self) -> None:
        self.executor.shutdown()
        for conn in self.connections:
            conn.close()


async def open_driver(
    driver: Driver, url: str, size: int, user: str, reply: str
) -> tuple[Turn, Callable[[], Awaitable[None]]]:
    """The driver's turn with `size` connections (or threads), and how to close them."""
    if driver.kind == "asyncpg":
        reset = None if driver.pool_reset else _no_reset
        pool = await asyncpg.create_pool(url, min_size=size, max_size=size, reset=reset)
        return asyncpg_turn(pool, user, reply), pool.close
    if driver.kind == "psycopg-async":
        apool = psycopg_pool.AsyncConnectionPool(
            url, min_size=size, max_size=size, kwargs={"autocommit": True}, open=False
        )
        await apool.open(wait=True)
        return psycopg_async_turn(apool, user, reply, driver.pipeline), apool.close
    threaded = ThreadedPsycopg(url, size, driver.pipeline)

    async def close_threaded() -> None:
        threaded.close()

    return threaded.turn(user, reply), close_threaded


# -- run on its own: every driver's turn, checked -----------------------------------------------------


async def check_drivers(url: str, turns: int) -> dict[str, float]:
    """`turns` turns of each driver on a conversation of its own; p50 ms per driver."""
    from _common import pct

    rng = random.Random(7)
    user, reply = body(rng, "user"), body(rng, "assistant")
    p50: dict[str, float] = {}
    for index, driver in enumerate(DRIVERS):
        turn, close = await open_driver(driver, url, 1, user, reply)
        conv, took = Conversation(index + 1), []
        try:
            for _ in range(turns):
                began = time.perf_counter()
                await turn(conv)
                took.append(1e3 * (time.perf_counter() - began))
        finally:
            await close()
        p50[driver.name] = pct(took, 50)
    return p50


def main() -> None:
    from testkit.postgres import PostgresServer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 20 turns per driver")
    ap.add_argument("--turns", type=int, default=None, help="turns per driver (200; quick 20)")
    args = ap.parse_args()
    turns = args.turns or (20 if args.quick else 200)
    with PostgresServer(settings={}) as server:
        server.create_database("turn")
        server.psql(SCHEMA, "turn")
        server.psql(
            f"INSERT INTO threads (id, conversation_key) SELECT i, 'webhook:c' || i FROM generate_series(1, {len(DRIVERS)}) i;"
            "INSERT INTO conversation_leases (thread_id, holder, fence, expires_at) "
            "SELECT id, 'bench', 1, now() + interval '1 day' FROM threads;",
            "turn",
        )
        p50 = asyncio.run(check_drivers(server.url("turn"), turns))
        counts = server.psql(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM runs), (SELECT sum(version) FROM threads)",
            "turn",
        )
    expected = len(DRIVERS) * turns
    found = tuple(int(part) for part in counts.strip().split("|"))
    if found != (2 * expected, expected, expected):
        raise SystemExit(
            f"expected (messages, runs, versions) {(2 * expected, expected, expected)}, found {found}"
        )
    print(f"| driver | turn p50 ({turns} turns, one conversation) |\n|---|---:|")
    for name, ms in p50.items():
        print(f"| {name} | {ms:.2f} ms |")


if __name__ == "__main__":
    main()
