"""Semantic facts, by (partition, key): one row per key, the newer value wins.

A partition is whose facts they are (`user:<id>`, or `conversation:<key>` for
an anonymous speaker); nothing here ever reads across partitions.
"""

from __future__ import annotations

import sqlite3

from agentd.store.queries import FactPartitions, Facts
from agentd.store.records import FACT_ROW as ROW
from agentd.store.records import Fact
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import DeleteFact, UpsertFact


@handles(UpsertFact)
def upsert_fact(conn: sqlite3.Connection, op: UpsertFact) -> str:
    """On conflict the row keeps its created_at and takes the new value, confidence, source and
    updated_at, unless it was updated after `now` (then the newer row stays: "kept"), so a late
    writer never overwrites a fresher fact."""
    existed = conn.execute(
        "SELECT 1 FROM facts WHERE partition = ? AND key = ?", (op.partition, op.key)
    ).fetchone()
    cur = conn.execute(
        f"INSERT INTO facts ({ROW.columns}) VALUES ({ROW.marks('?')})"
        " ON CONFLICT (partition, key) DO UPDATE SET value = excluded.value,"
        " confidence = excluded.confidence, source = excluded.source,"
        " updated_at = excluded.updated_at, run_id = excluded.run_id"
        " WHERE excluded.updated_at >= facts.updated_at",
        ROW.values(op.fact()),
    )
    if existed is None:
        return "created"
    return "updated" if cur.rowcount else "kept"


@handles(Facts)
def list_facts(conn: sqlite3.Connection, q: Facts) -> list[Fact]:
    rows = conn.execute(
        f"SELECT {ROW.columns} FROM facts WHERE partition = ? ORDER BY updated_at DESC, key LIMIT ?",
        (q.partition, -1 if q.limit is None else q.limit),
    ).fetchall()
    return [ROW.record_of(row) for row in rows]


@handles(FactPartitions)
def fact_partitions(conn: sqlite3.Connection, q: FactPartitions) -> list[str]:
    return [row[0] for row in conn.execute("SELECT DISTINCT partition FROM facts ORDER BY partition")]


@handles(DeleteFact)
def delete_fact(conn: sqlite3.Connection, op: DeleteFact) -> bool:
    return (
        conn.execute("DELETE FROM facts WHERE partition = ? AND key = ?", (op.partition, op.key)).rowcount > 0
    )
