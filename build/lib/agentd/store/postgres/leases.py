"""Named leases: one holder at a time for things only one daemon should do (a bot's gateway connection).

    token = await backend.leases.acquire("discord:bot", holder, ttl_s=15)   # None: someone else has it
    await backend.leases.renew("discord:bot", holder, token, ttl_s=15)      # False: it lapsed and was taken
    await backend.leases.release("discord:bot", holder, token)

A lease is free when nobody holds it or its holder let it run out (stopped renewing: killed, or
stalled longer than the ttl). Acquiring what one already holds renews it and keeps the token; a new
holder gets a new token, larger than every earlier one, to fence whatever the lease guards. Times are
the database's clock, so daemons whose clocks differ agree on who holds what.
"""

from __future__ import annotations

from typing import Any

import psycopg

from agentd.store.postgres.executor import PgExecutor

_ACQUIRE = (
    "INSERT INTO leases AS l (name, holder, token, expires_at)"
    " VALUES (%s, %s, nextval('lease_tokens'), clock_timestamp() + %s * interval '1 second')"
    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,"
    " token = CASE WHEN l.holder = excluded.holder AND l.expires_at >= clock_timestamp()"
    " THEN l.token ELSE excluded.token END"
    " WHERE l.holder = excluded.holder OR l.expires_at < clock_timestamp()"
    " RETURNING token"
)
_RENEW = (
    "UPDATE leases SET expires_at = clock_timestamp() + %s * interval '1 second'"
    " WHERE name = %s AND holder = %s AND token = %s RETURNING 1"
)
_RELEASE = "DELETE FROM leases WHERE name = %s AND holder = %s AND token = %s"
_HOLDER = "SELECT holder FROM leases WHERE name = %s AND expires_at >= clock_timestamp()"


class Leases:
    """agentd.store.base.Leases on the shared database."""

    def __init__(self, executor: PgExecutor):
        self._executor = executor

    async def acquire(self, name: str, holder: str, ttl_s: float) -> int | None:
        """The lease's token if `holder` has it now (new, taken over, or renewed), else None."""
        row = await self._one(_ACQUIRE, (name, holder, ttl_s))
        return None if row is None else int(row[0])

    async def renew(self, name: str, holder: str, token: int, ttl_s: float) -> bool:
        """Push the expiry back; False when the lease is no longer this holder's (it lapsed and was taken)."""
        return await self._one(_RENEW, (ttl_s, name, holder, token)) is not None

    async def release(self, name: str, holder: str, token: int) -> None:
        await self._executor.call(lambda conn: conn.execute(_RELEASE, (name, holder, token)))

    async def holder(self, name: str) -> str | None:
        """Who holds the lease now (None: nobody, or it lapsed)."""
        row = await self._one(_HOLDER, (name,))
        return None if row is None else str(row[0])

    async def _one(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        def job(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute(sql, args).fetchone()  # type: ignore[arg-type]  # (literal SQL)

        return await self._executor.call(job)
