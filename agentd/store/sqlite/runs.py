"""Runs: one row per unit of model work (a message turn, a compaction, a command ...)."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from typing import Any

from agentd.store.queries import Runs, RunTotals
from agentd.store.records import RUN_ROW as ROW
from agentd.store.records import RunRecord
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import InsertRun

_INSERT = f"INSERT INTO runs ({ROW.columns}) VALUES ({ROW.marks('?')})"


def insert_run(conn: sqlite3.Connection, run: RunRecord, **given: Any) -> None:
    """Insert a run row; `thread_id`, when given, is what the row records (a thread made in the same batch)."""
    conn.execute(_INSERT, ROW.values(run, **given))


@handles(InsertRun)
def _insert_run(conn: sqlite3.Connection, op: InsertRun) -> None:
    insert_run(conn, op.run)


@handles(Runs)
def list_runs(conn: sqlite3.Connection, q: Runs) -> list[dict[str, Any]]:
    where, args = ("WHERE conversation_key = ?", [q.conversation_key]) if q.conversation_key else ("", [])
    rows = conn.execute(
        f"SELECT {ROW.columns} FROM runs {where} ORDER BY started_at DESC, rowid DESC LIMIT ?",
        (*args, q.limit),
    ).fetchall()
    return [asdict(ROW.record_of(row)) for row in reversed(rows)]


@handles(RunTotals)
def run_totals(conn: sqlite3.Connection, q: RunTotals) -> dict[str, dict[str, int]]:
    where, args = ("WHERE conversation_key = ?", (q.conversation_key,)) if q.conversation_key else ("", ())
    totals: dict[str, dict[str, int]] = {}
    for trigger, runs, errors, tin, tout in conn.execute(
        "SELECT trigger, COUNT(*), SUM(status != 'ok'), SUM(input_tokens), SUM(output_tokens)"
        f" FROM runs {where} GROUP BY trigger",
        args,
    ):
        totals[trigger] = {
            "runs": runs,
            "errors": errors or 0,
            "input_tokens": tin or 0,
            "output_tokens": tout or 0,
        }
    return totals
