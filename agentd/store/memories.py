"""Persistent memories: facts an agent chose to keep, by (scope, key).

scope '' holds the agent's own facts; 'user:<id>' holds one person's facts
when an agent partitions memory per user.
"""

from __future__ import annotations

import sqlite3


def upsert_memory(
    conn: sqlite3.Connection, scope: str, key: str, value: str, run_id: str | None, now: float
) -> bool:
    """Insert or replace; returns True when the key is new."""
    existed = conn.execute("SELECT 1 FROM memories WHERE scope = ? AND key = ?", (scope, key)).fetchone()
    conn.execute(
        "INSERT INTO memories (scope, key, value, created_at, updated_at, run_id) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,"
        " run_id = excluded.run_id",
        (scope, key, value, now, now, run_id),
    )
    return existed is None


def get_memory(conn: sqlite3.Connection, scope: str, key: str) -> str | None:
    row = conn.execute("SELECT value FROM memories WHERE scope = ? AND key = ?", (scope, key)).fetchone()
    return None if row is None else row[0]


def delete_memory(conn: sqlite3.Connection, scope: str, key: str) -> bool:
    return conn.execute("DELETE FROM memories WHERE scope = ? AND key = ?", (scope, key)).rowcount > 0


def memory_keys(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Every scope's keys, sorted; loaded once when an agent starts."""
    keys: dict[str, list[str]] = {}
    for scope, key in conn.execute("SELECT scope, key FROM memories ORDER BY scope, key"):
        keys.setdefault(scope, []).append(key)
    return keys


def list_memories(conn: sqlite3.Connection, scope: str | None = None) -> list[dict[str, object]]:
    where, args = ("WHERE scope = ?", (scope,)) if scope is not None else ("", ())
    return [
        {"scope": s, "key": k, "value": v, "created_at": c, "updated_at": u}
        for s, k, v, c, u in conn.execute(
            f"SELECT scope, key, value, created_at, updated_at FROM memories {where} ORDER BY scope, key",
            args,
        )
    ]
