"""Connecting to the database: the URL, its label without secrets, and PostgreSQL errors as StoreErrors.

Every table lives in the `agentd` schema, so a database may hold other things too; each connection
searches only that schema (and pg_catalog).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentd.errors import LeaseLost, StoreError

SCHEMA = "agentd"
# Raised by agentd_check_fence (migration 0002) when a write's lease is no longer held.
LEASE_LOST_SQLSTATE = "AD001"
CONNECT_TIMEOUT_S = 10


def label_of(url: str) -> str:
    """postgresql://host:port/database: where the data is, never who logs in or with what password."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise StoreError(f"store.url is not a PostgreSQL URL: {e}") from None
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{host}{port}/{parts.get('dbname') or ''}"


def conninfo(url: str) -> str:
    """The URL with our connection settings: only the agentd schema, a bounded wait to connect."""
    return make_conninfo(url, options=f"-c search_path={SCHEMA}", connect_timeout=CONNECT_TIMEOUT_S)


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection in autocommit mode: BEGIN and COMMIT are sent by hand (in pipelines), or not at all."""
    return psycopg.connect(conninfo(url), autocommit=True)


async def connect_async(url: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True)


def as_store_error(label: str, e: BaseException) -> BaseException:
    """A PostgreSQL error as agentd's own (the fence's refusal as LeaseLost); anything else unchanged."""
    if not isinstance(e, psycopg.Error):
        return e
    if e.sqlstate == LEASE_LOST_SQLSTATE:
        detail = e.diag.message_primary or str(e)
        return LeaseLost(
            f"{label}: {detail}: another daemon took this conversation over, so this write was refused "
            "and nothing of it was kept"
        )
    return StoreError(f"{label}: {str(e).strip()}")
