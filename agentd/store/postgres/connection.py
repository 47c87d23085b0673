"""Connecting to the database: the URL, its label without secrets, and PostgreSQL errors as StoreErrors.

Every table lives in the `agentd` schema, so a database may hold other things too; each connection
searches only that schema (and pg_catalog).
That is set by a statement once connected, not by the `options` startup parameter: PgBouncer refuses
a client that sends `options` ("unsupported startup parameter"). Behind a pooler in transaction mode
(`store.pooler: transaction`) no session state survives a transaction, so there the search path must
come from the server (`ALTER ROLE ... SET search_path = agentd`), which opening checks, and nothing is
prepared server-side (a prepared statement would be looked up on another client's server connection).

Every connection also bounds its waits: connect_timeout, TCP keepalives and tcp_user_timeout (a peer
that vanished is noticed within the round-trip deadline) and statement_timeout (agentd/store/postgres/
deadlines.py bounds a round trip whose peer still acknowledges bytes but answers nothing).
"""

from __future__ import annotations

import time
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentd.errors import DatabaseUnavailable, LeaseLost, StoreError

SCHEMA = "agentd"
# Raised by agentd_check_fence (migration 0002) when a write's lease is no longer held.
LEASE_LOST_SQLSTATE = "AD001"
# Raised by agentd_check_fence (migration 0007) when a write reaches the server after its deadline.
DEADLINE_PASSED_SQLSTATE = "AD002"
CONNECT_TIMEOUT_S = 10
Pooler = Literal["none", "session", "transaction"]
POOLERS: tuple[Pooler, ...] = ("none", "session", "transaction")
KEEPALIVE_IDLE_S = 5  # idle seconds before the first TCP keepalive probe, then one a second


def label_of(url: str) -> str:
    """postgresql://host:port/database: where the data is, never who logs in or with what password."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise StoreError(f"store.url is not a PostgreSQL URL: {e}") from None
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{host}{port}/{parts.get('dbname') or ''}"


def database_of(url: str) -> str:
    """The database's name alone: what may be shown to anyone (host and port may not)."""
    try:
        return str(conninfo_to_dict(url).get("dbname") or "")
    except psycopg.ProgrammingError:
        return ""


def unavailable(label: str, detail: str, public: str) -> DatabaseUnavailable:
    """`label: detail` for the log; `public` for an answer, with the database's name, not its place."""
    database = label.rsplit("/", 1)[-1]
    return DatabaseUnavailable(f"{label}: {detail}", f"PostgreSQL database {database!r}: {public}")


def conninfo(url: str, deadline_s: float | None = None) -> str:
    """The URL with our connection settings: no `options` (see above), a bounded wait to connect, and
    with a round-trip deadline, TCP keepalives and tcp_user_timeout within it."""
    settings: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S}
    if deadline_s is not None:
        settings["connect_timeout"] = max(2, min(CONNECT_TIMEOUT_S, round(deadline_s)))  # (libpq: 2 at least)
        settings |= {"keepalives": 1, "keepalives_idle": KEEPALIVE_IDLE_S, "keepalives_interval": 1}
        settings |= {"keepalives_count": 3, "tcp_user_timeout": int(deadline_s * 1000)}
    return make_conninfo(url, **settings)


def _set_up(conn: psycopg.Connection[Any], pooler: Pooler, deadline_s: float | None) -> float:
    """Our session settings (not behind a transaction-mode pooler: there the server's own apply), and
    how far the server's clock is ahead of ours (seconds), measured by the same round trip."""
    before = time.time()
    if pooler == "transaction":
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::double precision").fetchone()
    else:
        timeout = "0" if deadline_s is None else str(int(deadline_s * 1000))
        row = conn.execute(
            "SELECT extract(epoch FROM clock_timestamp())::double precision,"
            " set_config('search_path', %s, false), set_config('statement_timeout', %s, false)",
            (SCHEMA, timeout),
        ).fetchone()
    assert row is not None
    return float(row[0]) - (before + time.time()) / 2


def connect(url: str, pooler: Pooler = "none", deadline_s: float | None = None) -> psycopg.Connection[Any]:
    """A connection in autocommit mode: BEGIN and COMMIT are sent by hand (in pipelines), or not at all."""
    return connect_measured(url, pooler, deadline_s)[0]


def connect_measured(
    url: str, pooler: Pooler = "none", deadline_s: float | None = None
) -> tuple[psycopg.Connection[Any], float]:
    """`connect`, and how far the server's clock is ahead of ours (seconds)."""
    prepare = None if pooler == "transaction" else 5  # (5: psycopg's default)
    conn = psycopg.connect(conninfo(url, deadline_s), autocommit=True, prepare_threshold=prepare)
    try:
        return conn, _set_up(conn, pooler, deadline_s)
    except BaseException:
        conn.close()
        raise


async def connect_async(url: str, deadline_s: float | None = None) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(conninfo(url, deadline_s), autocommit=True)
    await conn.execute("SELECT set_config('search_path', %s, false)", (SCHEMA,))
    return conn


def as_store_error(label: str, e: BaseException) -> BaseException:
    """A PostgreSQL error as agentd's own (the fence's refusal as LeaseLost); anything else unchanged."""
    if not isinstance(e, psycopg.Error):
        return e
    if e.sqlstate == DEADLINE_PASSED_SQLSTATE:
        return StoreError(
            f"{label}: {e.diag.message_primary or e}: it was refused and nothing of it was kept"
        )
    if e.sqlstate == LEASE_LOST_SQLSTATE:
        detail = e.diag.message_primary or str(e)
        return LeaseLost(
            f"{label}: {detail}: another daemon took this conversation over, so this write was refused "
            "and nothing of it was kept"
        )
    detail = str(e).strip()
    if e.sqlstate is None:  # (libpq's own: cannot connect, the connection broke; it names host and port)
        return unavailable(label, detail, "no connection (it cannot be reached, or the connection broke)")
    return unavailable(label, detail, e.diag.message_primary or f"it refused ({e.sqlstate})")
