"""The identity table: what this file belongs to (agent name, creation time)."""

from __future__ import annotations

import sqlite3


def ensure_identity(conn: sqlite3.Connection, values: dict[str, str]) -> dict[str, str]:
    """Set each key once (first write wins) and return the whole identity."""
    conn.executemany("INSERT OR IGNORE INTO identity (key, value) VALUES (?, ?)", list(values.items()))
    return dict(conn.execute("SELECT key, value FROM identity").fetchall())
