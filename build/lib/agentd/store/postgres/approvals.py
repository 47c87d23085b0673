"""Approvals on PostgreSQL: tool calls waiting for a person, with the state of the run each one paused.

Whichever daemon a person's /approve reaches decides it: the decision is a conditional update of the
shared row, so only the first of two decisions counts (the other gets RowMissing).
"""

from __future__ import annotations

import json
from typing import Any

from agentd.store.postgres.dispatch import Cx, Later, handles
from agentd.store.queries import ApprovalById, OpenApprovals
from agentd.store.records import ApprovalRecord
from agentd.store.writes import CloseApproval, DecideApproval, InsertApproval, RowMissing

_COLUMNS = (
    "id, conversation_key, run_id, tool, server, args, shown_args, requested_by, approvers, created_at,"
    " expires_at, status, decided_by, decided_at, state"
)


_NAMES = _COLUMNS.split(", ")  # (ApprovalRecord's fields, `state` last)
_JSON = {"args", "shown_args", "approvers"}


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@handles(InsertApproval)
def insert_approval(cx: Cx, op: InsertApproval) -> None:
    a = op.approval
    values = [_dump(getattr(a, c)) if c in _JSON else getattr(a, c) for c in _NAMES[:-1]]
    state = None if a.state is None else _dump(a.state)
    cx.run(
        f"INSERT INTO approvals (agent_id, {_COLUMNS}) VALUES (%s, {', '.join(['%s'] * len(_NAMES))})",
        (cx.agent_id, *values, state),
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


def _record(row: tuple[Any, ...]) -> ApprovalRecord:
    (id_, key, run_id, tool, server, args, shown, by, approvers, created, expires, status) = row[:12]
    decided_by, decided_at, state = row[12:]
    return ApprovalRecord(
        id=id_,
        conversation_key=key,
        run_id=run_id,
        tool=tool,
        server=server,
        args=json.loads(args),
        shown_args=json.loads(shown),
        requested_by=by,
        approvers=json.loads(approvers),
        created_at=created,
        expires_at=expires,
        status=status,
        decided_by=decided_by,
        decided_at=decided_at,
        state=None if state is None else json.loads(state),
    )


@handles(OpenApprovals)
def open_approvals(cx: Cx, q: OpenApprovals) -> Later[list[ApprovalRecord]]:
    cur = cx.run(
        f"SELECT {_COLUMNS} FROM approvals WHERE agent_id = %s AND state IS NOT NULL ORDER BY created_at, id",
        (cx.agent_id,),
    )
    return Later(lambda: [_record(row) for row in cur.fetchall()])


@handles(ApprovalById)
def approval_by_id(cx: Cx, q: ApprovalById) -> Later[ApprovalRecord | None]:
    cur = cx.run(f"SELECT {_COLUMNS} FROM approvals WHERE agent_id = %s AND id = %s", (cx.agent_id, q.id))
    return Later(lambda: None if (row := cur.fetchone()) is None else _record(row))
