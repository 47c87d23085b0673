"""The audit trail: memory writes, commands, compactions, permission and config decisions."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from agentd.store.queries import AuditEvents
from agentd.store.sqlite.dispatch import handles
from agentd.store.writes import AppendAudit


@handles(AppendAudit)
def insert_audit(conn: sqlite3.Connection, op: AppendAudit) -> None:
    conn.executemany(
        "INSERT INTO audit (ts, agent, kind, action, conversation_key, run_id, data, daemon)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                op.ts,
                op.agent,
                r.kind,
                r.action,
                r.conversation_key,
                r.run_id,
                json.dumps(r.data, separators=(",", ":")),
                op.daemon,
            )
            for r in op.records
        ],
    )


@handles(AuditEvents)
def query_audit(conn: sqlite3.Connection, q: AuditEvents) -> list[dict[str, Any]]:
    clauses, args = [], []
    for column, op, value in (("agent", "=", q.agent), ("kind", "=", q.kind), ("ts", ">=", q.since)):
        if value is not None:
            clauses.append(f"{column} {op} ?")
            args.append(value)
    if q.tool is not None:
        clauses.append("json_extract(data, '$.tool') = ?")
        args.append(q.tool)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT id, ts, agent, kind, action, conversation_key, run_id, data, daemon FROM audit {where}"
        " ORDER BY ts DESC, id DESC LIMIT ?",
        (*args, q.limit),
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
            "daemon": row[8],
        }
        for row in reversed(rows)
    ]
