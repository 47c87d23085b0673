"""One agent's rows as if they were its own SQLite file: raw SQL for tests and tools, never the product.

`PostgresStore.sql(job)` calls `job(conn)` where `conn.execute(sql, params)` takes SQLite's text
(`?` placeholders) and reads temporary views named like SQLite's tables, each showing only this
agent's rows with SQLite's columns (booleans as 0/1, `rowid` where SQLite has one), and a
`sqlite_master` listing them. The views live
in a transaction that is rolled back afterwards: nothing is left behind and nothing can be changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from agentd.store.records import APPROVAL_ROW, FACT_ROW

T = TypeVar("T")

VIEWS: dict[str, str] = {
    "identity": "SELECT key, value FROM agentd.identity",
    "threads": (
        "SELECT id, id AS rowid, conversation_key, status, created_at, ended_at, last_input_tokens,"
        " last_tokens_estimated::int AS last_tokens_estimated FROM agentd.threads"
    ),
    "messages": (
        "SELECT thread_id, seq, role, user_id, body, run_id, created_at, compacted::int AS compacted"
        " FROM agentd.messages"
    ),
    "summaries": "SELECT id, id AS rowid, thread_id, upto_seq, text, run_id, created_at FROM agentd.summaries",
    "runs": (
        "SELECT n AS rowid, id, conversation_key, thread_id, trigger, model, status, input_tokens,"
        " output_tokens, tokens_estimated::int AS tokens_estimated, last_input_tokens, model_calls,"
        " started_at, duration_ms, error, parent_run_id, daemon FROM agentd.runs"
    ),
    "audit": (
        "SELECT id, id AS rowid, ts, agent, kind, action, conversation_key, run_id, data, daemon FROM agentd.audit"
    ),
    "memories": "SELECT scope, key, value, created_at, updated_at, run_id FROM agentd.memories",
    "inbound_events": (
        "SELECT channel, event_id, conversation_key, run_id, received_at FROM agentd.inbound_events"
    ),
    "memory_state": "SELECT thread_id, layer, data, upto_seq, updated_at FROM agentd.memory_state",
    "episodes": (  # (with its keyword index's words, as SQLite's FTS5 tables hold them)
        "SELECT id, id AS rowid, partition, conversation_key, text, importance, created_at, run_id, embedder,"
        " vector, words::text AS words FROM agentd.episodes"
    ),
    "approvals": f"SELECT {APPROVAL_ROW.columns} FROM agentd.approvals",
    "facts": f"SELECT {FACT_ROW.columns} FROM agentd.facts",
}


class SqliteShaped:
    """What the job gets: `execute` with SQLite's placeholders, returning a psycopg cursor."""

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        if not params:  # (no parameters: psycopg reads the text as it is, % and all)
            return self.conn.execute(sql)  # type: ignore[arg-type]  # (a test's own SQL)
        return self.conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)  # type: ignore[arg-type]


def run_as_sqlite(conn: psycopg.Connection[Any], agent_id: int, job: Callable[[SqliteShaped], T]) -> T:
    conn.execute("BEGIN")
    try:
        for name, select in VIEWS.items():
            # (a temporary view comes before the agentd schema in the search path)
            conn.execute(f"CREATE TEMPORARY VIEW {name} AS {select} WHERE agent_id = {int(agent_id)}")  # type: ignore[arg-type]
        names = ", ".join(f"('{name}')" for name in VIEWS)  # (and SQLite's catalog of them)
        conn.execute(
            f"CREATE TEMPORARY VIEW sqlite_master AS SELECT 'table' AS type, name FROM (VALUES {names}) AS v(name)"
        )  # type: ignore[arg-type]
        return job(SqliteShaped(conn))
    finally:
        conn.execute("ROLLBACK")
