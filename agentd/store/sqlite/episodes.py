"""Episodes: what was said, per speaker partition, with the vector of the embedder that read it;
writes, retention, and the vectors an index is built from (reads of the episodes themselves are
episode_reads.py).

An episode's `embedder` and `vector` stay NULL until it is embedded; recall
only ever reads vectors of one embedder, so vectors of different models never
mix. Keyword search is FTS5 (`episodes_fts`, porter stemming), kept in sync by
triggers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agentd.store.queries import VectorChanges, Vectors
from agentd.store.records import NEW_EPISODE_ROW, AuditRecord, Pruned, StoredVector, VectorDelta
from agentd.store.sqlite.audit import insert_audit
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import (
    AppendAudit,
    DeletePartitionEpisodes,
    InsertEpisodes,
    PruneEpisodes,
    SetVectors,
)

_INSERT = f"INSERT INTO episodes ({NEW_EPISODE_ROW.columns}) VALUES ({NEW_EPISODE_ROW.marks('?')})"
# records.ends_by_asking in SQL: the text ends with a question mark
_ASKS_SQL = "rtrim(text, ' ' || char(9, 10, 13)) LIKE '%?'"


@handles(InsertEpisodes)
def insert_episodes(conn: sqlite3.Connection, op: InsertEpisodes) -> list[int]:
    """Insert in order; returns the new ids (the FTS index is kept in sync by triggers)."""
    ids = []
    for e in op.episodes:
        cur = conn.execute(_INSERT, NEW_EPISODE_ROW.values(e))
        assert cur.lastrowid is not None
        ids.append(cur.lastrowid)
    return ids


@handles(SetVectors)
def set_vectors(conn: sqlite3.Connection, op: SetVectors) -> None:
    conn.executemany(
        "UPDATE episodes SET embedder = ?, vector = ? WHERE id = ? AND vector IS NULL",
        [(op.embedder, blob, episode_id) for episode_id, blob in op.vectors],
    )


@handles(Vectors)
def load_vectors(conn: sqlite3.Connection, q: Vectors) -> list[StoredVector]:
    return [
        StoredVector(*row)
        for row in conn.execute(
            f"SELECT id, created_at, importance, vector, {_ASKS_SQL} FROM episodes"
            " WHERE partition = ? AND embedder = ? AND vector IS NOT NULL ORDER BY id",
            (q.partition, q.embedder),
        )
    ]


@handles(VectorChanges)
def vector_changes(conn: sqlite3.Connection, q: VectorChanges) -> VectorDelta:
    """One owner, one process: its indexes saw every change as it was made. Change 0 lists them all."""
    added = load_vectors(conn, Vectors(q.partition, q.embedder)) if q.since == 0 else []
    return VectorDelta(0, added, [])


@handles(PruneEpisodes)
def prune_episodes(conn: sqlite3.Connection, op: PruneEpisodes) -> Pruned:
    aged: list[int] = []
    if op.older_than is not None:  # found by episodes_by_age, not a read of the whole partition
        aged = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM episodes WHERE partition = ? AND created_at < ?",
                (op.partition, op.older_than),
            )
        ]
        _delete_ids(conn, aged)
    extra: list[int] = []
    if op.max_episodes is not None:
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM episodes WHERE partition = ?", (op.partition,)
        ).fetchone()
        if count > op.max_episodes:
            extra = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM episodes WHERE partition = ? ORDER BY importance, created_at, id LIMIT ?",
                    (op.partition, count - op.max_episodes),
                )
            ]
            _delete_ids(conn, extra)
    if aged or extra:
        data = {"partition": op.partition, "by_age": len(aged), "by_count": len(extra)}
        record = AuditRecord("memory", "prune_episodes", None, None, data)
        insert_audit(conn, AppendAudit(op.agent, [record], op.ts, op.daemon))
    return Pruned(aged + extra, len(aged), len(extra))


@handles(DeletePartitionEpisodes)
def delete_partition(conn: sqlite3.Connection, op: DeletePartitionEpisodes) -> int:
    deleted: int = conn.execute("DELETE FROM episodes WHERE partition = ?", (op.partition,)).rowcount
    data = {"partition": op.partition, "deleted": deleted, "by": op.by}
    insert_audit(
        conn,
        AppendAudit(op.agent, [AuditRecord("memory", "delete_episodes", None, None, data)], op.ts, op.daemon),
    )
    return deleted


def _delete_ids(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
    conn.executemany("DELETE FROM episodes WHERE id = ?", [(i,) for i in ids])
