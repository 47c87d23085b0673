"""Persistent memories: facts an agent chose to keep, by (scope, key).

scope '' holds the agent's own facts; 'user:<id>' holds one person's facts
when an agent partitions memory per user.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from agentd.store.queries import Memories, MemoryKeys, MemoryValue
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import DeleteMemory, RowMissing, UpsertMemory


@handles(UpsertMemory)
def upsert_memory(conn: sqlite3.Connection, op: UpsertMemory) -> bool:
    existed = conn.execute(
        "SELECT 1 FROM memories WHERE scope = ? AND key = ?", (op.scope, op.key)
    ).fetchone()
    conn.execute(
        "INSERT INTO memories (scope, key, value, created_at, updated_at, run_id) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,"
        " run_id = excluded.run_id",
        (op.scope, op.key, op.value, op.now, op.now, op.run_id),
    )
    return existed is None


@handles(MemoryValue)
def get_memory(conn: sqlite3.Connection, q: MemoryValue) -> str | None:
    row = conn.execute("SELECT value FROM memories WHERE scope = ? AND key = ?", (q.scope, q.key)).fetchone()
    return None if row is None else row[0]


@handles(DeleteMemory)
def delete_memory(conn: sqlite3.Connection, op: DeleteMemory) -> bool:
    deleted = (
        conn.execute("DELETE FROM memories WHERE scope = ? AND key = ?", (op.scope, op.key)).rowcount > 0
    )
    if op.must_exist and not deleted:
        raise RowMissing(f"no memory with key {op.key!r}")
    return deleted


@handles(MemoryKeys)
def memory_keys(conn: sqlite3.Connection, q: MemoryKeys) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for scope, key in conn.execute("SELECT scope, key FROM memories ORDER BY scope, key"):
        keys.setdefault(scope, []).append(key)
    return keys


@handles(Memories)
def list_memories(conn: sqlite3.Connection, q: Memories) -> list[dict[str, Any]]:
    where, args = ("WHERE scope = ?", (q.scope,)) if q.scope is not None else ("", ())
    return [
        {"scope": s, "key": k, "value": v, "created_at": c, "updated_at": u}
        for s, k, v, c, u in conn.execute(
            f"SELECT scope, key, value, created_at, updated_at FROM memories {where} ORDER BY scope, key",
            args,
        )
    ]
