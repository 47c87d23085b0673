"""Runs (one row per unit of model work), on PostgreSQL."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import Runs, RunTotals
from agentd.store.records import RUN_ROW as ROW
from agentd.store.records import RunRecord
from agentd.store.writes import InsertRun

_INSERT_RUN = f"INSERT INTO runs (agent_id, {ROW.columns}) VALUES (%s, {ROW.marks('%s')})"


def insert_run(cx: Cx, run: RunRecord, **given: Any) -> None:
    """Insert a run row; `thread_id`, when given, is what the row records (a thread made in the same batch)."""
    cx.run(_INSERT_RUN, (cx.agent_id, *ROW.values(run, **given)))


@handles(InsertRun)
def _insert_run(cx: Cx, op: InsertRun) -> None:
    insert_run(cx, op.run)


@handles(Runs)
def list_runs(cx: Cx, q: Runs) -> Later[list[dict[str, Any]]]:
    where, args = ("AND conversation_key = %s", [q.conversation_key]) if q.conversation_key else ("", [])
    cur = cx.run(
        f"SELECT {ROW.columns} FROM runs WHERE agent_id = %s {where}"
        " ORDER BY started_at DESC, n DESC LIMIT %s",
        (cx.agent_id, *args, q.limit),
    )
    return Later(lambda: [asdict(ROW.record_of(row)) for row in reversed(cur.fetchall())])


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
