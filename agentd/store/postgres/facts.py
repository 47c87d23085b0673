"""Semantic facts by (partition, key), the newer value wins, on PostgreSQL."""

from __future__ import annotations

from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import FactPartitions, Facts
from agentd.store.records import FACT_ROW as ROW
from agentd.store.records import Fact
from agentd.store.writes import DeleteFact, UpsertFact


@handles(UpsertFact)
def upsert_fact(cx: Cx, op: UpsertFact) -> Later[str]:
    """As on SQLite: a conflict keeps created_at and takes the rest, unless the row was updated after
    `now` (no row comes back: "kept"); xmax = 0 on the returned row tells an insert ("created")."""
    cur = cx.run(
        f"INSERT INTO facts AS f (agent_id, {ROW.columns}) VALUES (%s, {ROW.marks('%s')})"
        " ON CONFLICT (agent_id, partition, key) DO UPDATE SET value = excluded.value,"
        " confidence = excluded.confidence, source = excluded.source,"
        " updated_at = excluded.updated_at, run_id = excluded.run_id"
        " WHERE excluded.updated_at >= f.updated_at RETURNING xmax = 0",
        (cx.agent_id, *ROW.values(op.fact())),
    )

    def read() -> str:
        row = cur.fetchone()
        if row is None:
            return "kept"
        return "created" if row[0] else "updated"

    return Later(read)


@handles(Facts)
def list_facts(cx: Cx, q: Facts) -> Later[list[Fact]]:
    cur = cx.run(
        f"SELECT {ROW.columns} FROM facts WHERE agent_id = %s AND partition = %s"
        " ORDER BY updated_at DESC, key LIMIT %s",
        (cx.agent_id, q.partition, q.limit),
    )
    return Later(lambda: [ROW.record_of(row) for row in cur.fetchall()])


@handles(FactPartitions)
def fact_partitions(cx: Cx, q: FactPartitions) -> Later[list[str]]:
    cur = cx.run(
        "SELECT DISTINCT partition FROM facts WHERE agent_id = %s ORDER BY partition", (cx.agent_id,)
    )
    return Later(lambda: [row[0] for row in cur.fetchall()])


@handles(DeleteFact)
def delete_fact(cx: Cx, op: DeleteFact) -> Later[bool]:
    cur = cx.run(
        "DELETE FROM facts WHERE agent_id = %s AND partition = %s AND key = %s RETURNING 1",
        (cx.agent_id, op.partition, op.key),
    )
    return Later(lambda: bool(cur.fetchall()))
