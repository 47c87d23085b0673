"""The audit trail: memory writes, commands, compactions, permission and config decisions, as one hash
chain per file (agentd/store/audit_chain.py says what each hash covers)."""

from __future__ import annotations

import sqlite3
from typing import Any

from agentd.store.audit_chain import (
    EVENT_COLUMNS,
    GENESIS,
    TRAIL_COLUMNS,
    hex_of,
    link,
    listed_event,
    seal,
    seal_existing,
    stored_event,
)
from agentd.store.queries import AuditEvents, AuditHead, AuditTrail
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import AppendAudit

_INSERT = (
    "INSERT INTO audit (ts, agent, kind, action, conversation_key, run_id, data, daemon, seq, salts,"
    " prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def chain_head(conn: sqlite3.Connection) -> tuple[int, bytes]:
    row = conn.execute("SELECT seq, head FROM audit_chain WHERE id = 1").fetchone()
    return (0, GENESIS) if row is None else (row[0], row[1])


def _set_head(conn: sqlite3.Connection, seq: int, head: bytes) -> None:
    conn.execute(
        "INSERT INTO audit_chain (id, seq, head) VALUES (1, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, head = excluded.head",
        (seq, head),
    )


@handles(AppendAudit)
def insert_audit(conn: sqlite3.Connection, op: AppendAudit) -> None:
    """Append the events to the chain. The file has one writer (the store thread, in a transaction), so
    reading the head and writing after it cannot interleave with another append."""
    if not op.records:
        return
    seq, prev = chain_head(conn)
    rows = []
    for r in op.records:
        sealed = seal(r, op.ts, op.agent, op.daemon)
        seq += 1
        digest = link(prev, seq, sealed.digest)
        row = (op.ts, op.agent, r.kind, r.action, r.conversation_key, r.run_id, sealed.data, op.daemon)
        rows.append((*row, seq, sealed.salts, prev, digest))
        prev = digest
    conn.executemany(_INSERT, rows)
    _set_head(conn, seq, prev)


def seal_unchained(conn: sqlite3.Connection) -> None:
    """Migration step: chain the events written before the chain existed, in the order written."""
    rows = conn.execute(
        "SELECT id, ts, agent, kind, action, conversation_key, run_id, data, daemon FROM audit"
        " WHERE seq IS NULL ORDER BY id"
    ).fetchall()
    if not rows:
        return
    sealed = seal_existing((row[1:] for row in rows), *chain_head(conn))
    conn.executemany(
        "UPDATE audit SET seq = ?, data = ?, salts = ?, prev_hash = ?, hash = ? WHERE id = ?",
        [(*chained, row[0]) for chained, row in zip(sealed, rows, strict=True)],
    )
    _set_head(conn, sealed[-1][0], sealed[-1][4])


@handles(AuditEvents)
def query_audit(conn: sqlite3.Connection, q: AuditEvents) -> list[dict[str, Any]]:
    clauses = [f"{column} {op} ?" for column, op, _ in q.conditions()]
    args = [value for _, _, value in q.conditions()]
    if q.tool is not None:
        clauses.append("json_extract(data, '$.tool') = ?")
        args.append(q.tool)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM audit {where} ORDER BY ts DESC, id DESC LIMIT ?", (*args, q.limit)
    ).fetchall()
    return [listed_event(row) for row in reversed(rows)]


@handles(AuditTrail)
def audit_trail(conn: sqlite3.Connection, q: AuditTrail) -> list[dict[str, Any]]:
    where, args = "seq > ?", list[float]([q.after_seq])
    if q.since is not None:
        where += " AND seq >= (SELECT MIN(seq) FROM audit WHERE ts >= ?)"
        args.append(q.since)
    rows = conn.execute(
        f"SELECT {TRAIL_COLUMNS} FROM audit WHERE {where} ORDER BY seq LIMIT ?", (*args, q.limit)
    ).fetchall()
    return [stored_event(row) for row in rows]


@handles(AuditHead)
def audit_head(conn: sqlite3.Connection, q: AuditHead) -> tuple[int, str] | None:
    row = conn.execute("SELECT seq, head FROM audit_chain WHERE id = 1").fetchone()
    return None if row is None else (row[0], hex_of(row[1]))
