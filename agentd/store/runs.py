"""Runs: one row per unit of model work (a message turn, a compaction, a command ...)."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(slots=True)
class RunRecord:
    id: str
    conversation_key: str | None
    trigger: str  # message | compaction | command | fold | extraction | summary
    model: str | None
    status: str  # ok | error
    started_at: float
    thread_id: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_estimated: bool = False
    last_input_tokens: int | None = None
    model_calls: int = 0
    duration_ms: float | None = None
    error: str | None = None
    parent_run_id: str | None = None


_COLUMNS = tuple(RunRecord.__dataclass_fields__)
_INSERT = f"INSERT INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"


def insert_run(conn: sqlite3.Connection, run: RunRecord) -> None:
    conn.execute(_INSERT, tuple(getattr(run, c) for c in _COLUMNS))


def list_runs(
    conn: sqlite3.Connection, conversation_key: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    where, args = ("WHERE conversation_key = ?", [conversation_key]) if conversation_key else ("", [])
    rows = conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM runs {where} ORDER BY started_at DESC, rowid DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    out = [asdict(RunRecord(*row)) for row in reversed(rows)]
    for run in out:
        run["tokens_estimated"] = bool(run["tokens_estimated"])
    return out


def run_totals(conn: sqlite3.Connection, conversation_key: str | None = None) -> dict[str, dict[str, int]]:
    """Per trigger: runs, errors, input and output tokens."""
    where, args = ("WHERE conversation_key = ?", (conversation_key,)) if conversation_key else ("", ())
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
