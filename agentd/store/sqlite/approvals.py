"""Approvals: tool calls waiting for a person, with the state of the run each one paused."""

from __future__ import annotations

import sqlite3

from agentd.store.queries import ApprovalById, OpenApprovals
from agentd.store.records import APPROVAL_ROW as ROW
from agentd.store.records import ApprovalRecord
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import CloseApproval, DecideApproval, InsertApproval, RowMissing


@handles(InsertApproval)
def insert_approval(conn: sqlite3.Connection, op: InsertApproval) -> None:
    conn.execute(f"INSERT INTO approvals ({ROW.columns}) VALUES ({ROW.marks('?')})", ROW.values(op.approval))


@handles(DecideApproval)
def decide_approval(conn: sqlite3.Connection, op: DecideApproval) -> None:
    cursor = conn.execute(
        "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ? WHERE id = ? AND status = 'pending'",
        (op.status, op.by, op.at, op.id),
    )
    if cursor.rowcount != 1:
        raise RowMissing(f"approval {op.id} is not pending")


@handles(CloseApproval)
def close_approval(conn: sqlite3.Connection, op: CloseApproval) -> None:
    conn.execute("UPDATE approvals SET state = NULL WHERE id = ?", (op.id,))


@handles(OpenApprovals)
def open_approvals(conn: sqlite3.Connection, q: OpenApprovals) -> list[ApprovalRecord]:
    sql = f"SELECT {ROW.columns} FROM approvals WHERE state IS NOT NULL ORDER BY created_at, id"
    return [ROW.record_of(row) for row in conn.execute(sql)]


@handles(ApprovalById)
def approval_by_id(conn: sqlite3.Connection, q: ApprovalById) -> ApprovalRecord | None:
    row = conn.execute(f"SELECT {ROW.columns} FROM approvals WHERE id = ?", (q.id,)).fetchone()
    return None if row is None else ROW.record_of(row)
