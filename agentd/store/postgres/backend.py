"""The PostgreSQL database of a process: opened once (by `Resources`), shared by all its agents' stores.

Opening connects, migrates under the migration lock (several daemons starting at once migrate once;
a database from a newer agentd is refused), and starts what claims need: the LISTEN connection and
the heartbeat. `store(agent)` is one agent's view of the database; `leases` are named leases for
singletons (agentd/store/postgres/leases.py).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

import psycopg

from agentd.errors import DatabaseUnavailable, NewerSchema, NotStored, StoreError
from agentd.store.postgres.claims import ClaimQueue
from agentd.store.postgres.connection import Pooler, database_of, label_of
from agentd.store.postgres.executor import DEFAULT_THREADS, PgExecutor
from agentd.store.postgres.leases import Leases
from agentd.store.postgres.migrations import MIGRATIONS, Migrations, migrate
from agentd.store.postgres.stop_asks import PgStopAsks
from agentd.store.postgres.store import PostgresStore
from agentd.store.postgres.wakeups import Wakeups

DEFAULT_LEASE_S = 15.0
MIN_DEADLINE_S = 1.0


class PostgresBackend:
    """An async context manager: `async with PostgresBackend(url, daemon=...) as backend:`."""

    def __init__(
        self,
        url: str,
        *,
        daemon: str,
        lease_s: float = DEFAULT_LEASE_S,
        heartbeat_s: float | None = None,
        threads: int = DEFAULT_THREADS,
        migrations: Migrations = MIGRATIONS,
        deadline_s: float | None = None,
        pooler: Pooler = "none",
    ):
        """`daemon` is recorded on every run and audit event and names this process's claims;
        `heartbeat_s` (default: a third of `lease_s`) is how often held leases are renewed;
        `deadline_s` (default and at most: `lease_s`, at least 1 s) bounds every round trip; `pooler` says what
        sits between agentd and the server (agentd/store/postgres/connection.py)."""
        self.url = url
        self.label = label_of(url)
        self.daemon = daemon
        self.pooler = pooler
        # (at least MIN_DEADLINE_S: a sub-second lease, tests only, must not time out ordinary queries)
        deadline_s = max(MIN_DEADLINE_S, lease_s if deadline_s is None else min(deadline_s, lease_s))
        self.executor = PgExecutor(url, self.label, threads, deadline_s=deadline_s, pooler=pooler)
        self.wakeups = Wakeups(url, self.label)
        self.claims = ClaimQueue(self.executor, self.wakeups, daemon, lease_s, heartbeat_s)
        self.leases = Leases(self.executor)
        self.stop_asks = PgStopAsks(self.executor, self.wakeups, daemon)  # /stop reaching another daemon
        self._migrations = migrations
        self.applied: list[str] = []  # migrations this process applied when it opened the database
        self._opened = False

    async def open(self) -> list[str]:
        try:
            self.applied = await self.executor.call(
                lambda conn: migrate(conn, self._migrations, pooler=self.pooler), bounded=False
            )
        except NewerSchema:
            self.executor.close()
            raise
        except StoreError as e:
            self.executor.close()
            raise StoreError(f"cannot open the store: {e}") from e
        if self.pooler != "transaction":  # (LISTEN is session state: there waiting claims poll)
            self.wakeups.start()
        self.claims.start()
        self._opened = True
        return self.applied

    async def close(self) -> None:
        if not self._opened:
            return
        self._opened = False
        await self.claims.close()
        await self.wakeups.close()
        self.executor.close()

    async def __aenter__(self) -> PostgresBackend:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def ping(self, timeout_s: float) -> str | None:
        """None when the database answers within `timeout_s`, else why not, fit to show anyone (the
        database's name, never its host or port): readiness (GET /readyz)."""
        job = self.executor.call(lambda conn: conn.execute("SELECT 1"), idempotent=True)
        try:
            await asyncio.wait_for(job, timeout_s)
        except TimeoutError:
            return f"PostgreSQL database {database_of(self.url)!r}: no answer within {timeout_s:g}s"
        except DatabaseUnavailable as e:
            return e.public
        except StoreError:
            return f"PostgreSQL database {database_of(self.url)!r}: it refused"
        return None

    def store(self, agent: str, *, readonly: bool = False) -> PostgresStore:
        """The store of the agent (or `_daemon`) `agent`; not opened yet."""
        return PostgresStore(self, agent, readonly=readonly)

    async def agent_names(self) -> list[str]:
        """Every agent with a row (anything ever opened in the database, `_daemon` included), sorted."""

        def job(conn: psycopg.Connection[Any]) -> list[str]:
            return [row[0] for row in conn.execute('SELECT name FROM agents ORDER BY name COLLATE "C"')]

        return await self.executor.call(job, idempotent=True)

    async def agent_id(self, name: str, *, create: bool) -> int:
        """The agent's id in the database (its row made on first use, unless `create` is False)."""

        def job(conn: psycopg.Connection[Any]) -> int | None:
            if create:
                sql = (
                    "INSERT INTO agents (name, created_at) VALUES (%s, extract(epoch FROM now()))"
                    " ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id"
                )
            else:
                sql = "SELECT id FROM agents WHERE name = %s"
            row = conn.execute(sql, (name,)).fetchone()  # type: ignore[arg-type]  # (literal SQL)
            return None if row is None else int(row[0])

        found = await self.executor.call(job)
        if found is None:
            raise NotStored(f"no data for agent {name!r} in {self.label}")
        return found
