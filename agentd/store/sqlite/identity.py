"""The identity table: what this file belongs to (agent name, creation time)."""

from __future__ import annotations

import sqlite3

from agentd.store.sqlite.handlers import handles
from agentd.store.writes import EnsureIdentity


@handles(EnsureIdentity)
def ensure_identity(conn: sqlite3.Connection, op: EnsureIdentity) -> dict[str, str]:
    conn.executemany("INSERT OR IGNORE INTO identity (key, value) VALUES (?, ?)", list(op.values.items()))
    return dict(conn.execute("SELECT key, value FROM identity").fetchall())
