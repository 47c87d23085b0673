"""Approvals on PostgreSQL: tool calls waiting for a person, with the state of the run each one paused.

Whichever daemon a person's /approve reaches decides it: the decision is a conditional update of the
shared row, so only the first of two decisions counts (the other gets RowMissing).
"""

from __future__ import annotations

from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import ApprovalById, OpenApprovals
from agentd.store.records import APPROVAL_ROW as ROW
from agentd.store.records import ApprovalRecord
from agentd.store.writes import CloseApproval, DecideApproval, InsertApproval, RowMissing


@handles(InsertApproval)
def insert_approval(cx: Cx, op: InsertApproval) -> None:
    cx.run(
        f"INSERT INTO approvals (agent_id, {ROW.columns}) VALUES (%s, {ROW.marks('%s')})",
        (cx.agent_id, *ROW.values(op.approval)),
    )


@handles(DecideApproval, reads_midway=lambda op: True)
def decide_approval(cx: Cx, op: DecideApproval) -> None:
    decided = cx.run(
        "UPDATE approvals SET status = %s, decided_by = %s, decided_at = %s"
        " WHERE agent_id = %s AND id = %s AND status = 'pending' RETURNING 1",
        (op.status, op.by, op.at, cx.agent_id, op.id),
    )
    if len(decided.fetchall()) != 1:
        raise RowMissing(f"approval {op.id} is not pending")


@handles(CloseApproval)
def close_approval(cx: Cx, op: CloseApproval) -> None:
    cx.run("UPDATE approvals SET state = NULL WHERE agent_id = %s AND id = %s", (cx.agent_id, op.id))


@handles(OpenApprovals)
def open_approvals(cx: Cx, q: OpenApprovals) -> Later[list[ApprovalRecord]]:
    cur = cx.run(
        f"SELECT {ROW.columns} FROM approvals WHERE agent_id = %s AND state IS NOT NULL ORDER BY created_at, id",
        (cx.agent_id,),
    )
    return Later(lambda: [ROW.record_of(row) for row in cur.fetchall()])


@handles(ApprovalById)
def approval_by_id(cx: Cx, q: ApprovalById) -> Later[ApprovalRecord | None]:
    cur = cx.run(f"SELECT {ROW.columns} FROM approvals WHERE agent_id = %s AND id = %s", (cx.agent_id, q.id))
    return Later(lambda: None if (row := cur.fetchone()) is None else ROW.record_of(row))
