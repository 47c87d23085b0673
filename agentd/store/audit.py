"""The audit trail: memory writes, commands, compactions, permission and config decisions."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class AuditRecord:
    kind: str
    action: str
    conversation_key: str | None = None
    run_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


def insert_audit(conn: sqlite3.Connection, agent: str, records: list[AuditRecord], ts: float) -> None:
    conn.executemany(
        "INSERT INTO audit (ts, agent, kind, action, conversation_key, run_id, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                ts,
                agent,
                r.kind,
                r.action,
                r.conversation_key,
                r.run_id,
                json.dumps(r.data, separators=(",", ":")),
            )
            for r in records
        ],
    )


def query_audit(
    conn: sqlite3.Connection,
    *,
    agent: str | None = None,
    kind: str | None = None,
    since: float | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """The newest `limit` events matching the filters, oldest first."""
    clauses, args = [], []
    for column, op, value in (("agent", "=", agent), ("kind", "=", kind), ("ts", ">=", since)):
        if value is not None:
            clauses.append(f"{column} {op} ?")
            args.append(value)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT id, ts, agent, kind, action, conversation_key, run_id, data FROM audit {where}"
        " ORDER BY ts DESC, id DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [
        {
            "id": row[0],
            "ts": row[1],
            "agent": row[2],
            "kind": row[3],
            "action": row[4],
            "conversation_key": row[5],
            "run_id": row[6],
            "data": json.loads(row[7]),
        }
        for row in reversed(rows)
    ]
