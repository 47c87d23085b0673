"""Runs (one row per unit of model work) and the audit trail, on PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from agentd.store.postgres.dispatch import Cx, Later, handles
from agentd.store.queries import AuditEvents, Runs, RunTotals
from agentd.store.records import RUN_COLUMNS, RunRecord
from agentd.store.writes import AppendAudit, InsertRun

_INSERT_RUN = f"INSERT INTO runs (agent_id, {', '.join(RUN_COLUMNS)}) VALUES (%s, {', '.join(['%s'] * len(RUN_COLUMNS))})"
_THREAD = RUN_COLUMNS.index("thread_id")
_UNSET: Any = object()
_AUDIT_COLUMNS = "id, ts, agent, kind, action, conversation_key, run_id, data, daemon"


def insert_run(cx: Cx, run: RunRecord, thread_id: Any = _UNSET) -> None:
    """Insert a run row; `thread_id`, when given, is what the row records (a thread made in the same batch)."""
    values = [getattr(run, c) for c in RUN_COLUMNS]
    if thread_id is not _UNSET:
        values[_THREAD] = thread_id
    cx.run(_INSERT_RUN, (cx.agent_id, *values))


@handles(InsertRun)
def _insert_run(cx: Cx, op: InsertRun) -> None:
    insert_run(cx, op.run)


@handles(Runs)
def list_runs(cx: Cx, q: Runs) -> Later[list[dict[str, Any]]]:
    where, args = ("AND conversation_key = %s", [q.conversation_key]) if q.conversation_key else ("", [])
    cur = cx.run(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE agent_id = %s {where}"
        " ORDER BY started_at DESC, n DESC LIMIT %s",
        (cx.agent_id, *args, q.limit),
    )
    return Later(lambda: [asdict(RunRecord(*row)) for row in reversed(cur.fetchall())])


@handles(RunTotals)
def run_totals(cx: Cx, q: RunTotals) -> Later[dict[str, dict[str, int]]]:
    where, args = ("AND conversation_key = %s", [q.conversation_key]) if q.conversation_key else ("", [])
    cur = cx.run(
        "SELECT trigger, count(*), count(*) FILTER (WHERE status <> 'ok'), sum(input_tokens),"
        f" sum(output_tokens) FROM runs WHERE agent_id = %s {where} GROUP BY trigger",
        (cx.agent_id, *args),
    )
    return Later(
        lambda: {
            trigger: {
                "runs": runs,
                "errors": errors,
                "input_tokens": int(tin or 0),
                "output_tokens": int(tout or 0),
            }
            for trigger, runs, errors, tin, tout in cur.fetchall()
        }
    )


@handles(AppendAudit)
def insert_audit(cx: Cx, op: AppendAudit) -> None:
    rs = op.records
    cx.run(
        "INSERT INTO audit (agent_id, ts, agent, kind, action, conversation_key, run_id, data, daemon)"
        " SELECT %s, %s, %s, x.kind, x.action, x.conversation_key, x.run_id, x.data, %s"
        " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])"
        " WITH ORDINALITY AS x(kind, action, conversation_key, run_id, data, n) ORDER BY x.n",
        (
            cx.agent_id,
            op.ts,
            op.agent,
            op.daemon,
            [r.kind for r in rs],
            [r.action for r in rs],
            [r.conversation_key for r in rs],
            [r.run_id for r in rs],
            [json.dumps(r.data, separators=(",", ":")) for r in rs],
        ),
    )


@handles(AuditEvents)
def query_audit(cx: Cx, q: AuditEvents) -> Later[list[dict[str, Any]]]:
    clauses: list[str] = ["agent_id = %s"]
    args: list[Any] = [cx.agent_id]
    for column, op, value in (("agent", "=", q.agent), ("kind", "=", q.kind), ("ts", ">=", q.since)):
        if value is not None:
            clauses.append(f"{column} {op} %s")
            args.append(value)
    cur = cx.run(
        f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE {' AND '.join(clauses)} ORDER BY ts DESC, id DESC LIMIT %s",
        (*args, q.limit),
    )

    def read() -> list[dict[str, Any]]:
        names = _AUDIT_COLUMNS.split(", ")
        events = [dict(zip(names, row, strict=True)) for row in reversed(cur.fetchall())]
        for event in events:
            event["data"] = json.loads(event["data"])
        return events

    return Later(read)
