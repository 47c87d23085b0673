"""Semantic facts, by (partition, key): one row per key, the newer value wins.

A partition is whose facts they are (`user:<id>`, or `conversation:<key>` for
an anonymous speaker); nothing here ever reads across partitions.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fact:
    partition: str
    key: str
    value: str
    confidence: float
    source: str | None
    created_at: float
    updated_at: float
    run_id: str | None = None


_COLUMNS = "partition, key, value, confidence, source, created_at, updated_at, run_id"


def upsert_fact(
    conn: sqlite3.Connection,
    partition: str,
    key: str,
    value: str,
    confidence: float,
    source: str | None,
    run_id: str | None,
    now: float,
) -> str:
    """Insert or update one fact; returns "created", "updated" or "kept".

    On conflict the row keeps its created_at and takes the new value, confidence,
    source and updated_at, unless it was updated after `now` (then the newer row
    stays: "kept"), so a late writer never overwrites a fresher fact.
    """
    existed = conn.execute("SELECT 1 FROM facts WHERE partition = ? AND key = ?", (partition, key)).fetchone()
    cur = conn.execute(
        f"INSERT INTO facts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (partition, key) DO UPDATE SET value = excluded.value,"
        " confidence = excluded.confidence, source = excluded.source,"
        " updated_at = excluded.updated_at, run_id = excluded.run_id"
        " WHERE excluded.updated_at >= facts.updated_at",
        (partition, key, value, confidence, source, now, now, run_id),
    )
    if existed is None:
        return "created"
    return "updated" if cur.rowcount else "kept"


def list_facts(conn: sqlite3.Connection, partition: str, limit: int | None = None) -> list[Fact]:
    """A partition's facts, the most recently updated first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM facts WHERE partition = ? ORDER BY updated_at DESC, key LIMIT ?",
        (partition, -1 if limit is None else limit),
    ).fetchall()
    return [Fact(*row) for row in rows]


def delete_fact(conn: sqlite3.Connection, partition: str, key: str) -> bool:
    return conn.execute("DELETE FROM facts WHERE partition = ? AND key = ?", (partition, key)).rowcount > 0
