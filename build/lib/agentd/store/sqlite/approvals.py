"""Approvals: tool calls waiting for a person, with the state of the run each one paused."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from agentd.store.queries import ApprovalById, OpenApprovals
from agentd.store.records import ApprovalRecord
from agentd.store.sqlite.dispatch import handles
from agentd.store.writes import CloseApproval, DecideApproval, InsertApproval, RowMissing

_COLUMNS = (
    "id, conversation_key, run_id, tool, server, args, shown_args, requested_by, approvers, created_at,"
    " expires_at, status, decided_by, decided_at, state"
)


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@handles(InsertApproval)
def insert_approval(conn: sqlite3.Connection, op: InsertApproval) -> None:
    a = op.approval
    conn.execute(
        f"INSERT INTO approvals ({_COLUMNS}) VALUES ({', '.join('?' * 15)})",
        (
            a.id,
            a.conversation_key,
            a.run_id,
            a.tool,
            a.server,
            _dump(a.args),
            _dump(a.shown_args),
            a.requested_by,
            _dump(a.approvers),
            a.created_at,
            a.expires_at,
            a.status,
            a.decided_by,
            a.decided_at,
            None if a.state is None else _dump(a.state),
        ),
    )


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


def _record(row: tuple[Any, ...]) -> ApprovalRecord:
    return ApprovalRecord(
        id=row[0],
        conversation_key=row[1],
        run_id=row[2],
        tool=row[3],
        server=row[4],
        args=json.loads(row[5]),
        shown_args=json.loads(row[6]),
        requested_by=row[7],
        approvers=json.loads(row[8]),
        created_at=row[9],
        expires_at=row[10],
        status=row[11],
        decided_by=row[12],
        decided_at=row[13],
        state=None if row[14] is None else json.loads(row[14]),
    )


@handles(OpenApprovals)
def open_approvals(conn: sqlite3.Connection, q: OpenApprovals) -> list[ApprovalRecord]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals WHERE state IS NOT NULL ORDER BY created_at, id"
    ).fetchall()
    return [_record(row) for row in rows]


@handles(ApprovalById)
def approval_by_id(conn: sqlite3.Connection, q: ApprovalById) -> ApprovalRecord | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (q.id,)).fetchone()
    return None if row is None else _record(row)
