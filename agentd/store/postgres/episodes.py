"""Episodes on PostgreSQL: writes, retention, and how a daemon's vector index catches up with others'.

Several daemons keep in-memory vector indexes of the same partitions (agentd/memory/vectors.py), so
each must learn what the others wrote, embedded or deleted. Every write to a partition's episodes
moves the partition's counter (`episode_partitions.change`) in its own transaction and stamps the
rows it inserts or embeds with the new value; deleted ids are listed by change in
`episode_deletions`. An index that stands at change c asks for what came after c (VectorChanges).

Why a counter and not the episode ids: ids come from a sequence and commit out of order, so an index
that has seen id 12 may still miss id 11, committed a moment later. Moving the counter locks its row
until the transaction ends, so the writes of one partition commit one after the other in counter
order: when change c is visible, every change before it is too, and "after c" misses nothing. The
writes of one partition are one person's, so they rarely wait for each other; partitions are always
locked in sorted order, so two writers never deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.store.postgres.audit import insert_audit
from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import VectorChanges, Vectors
from agentd.store.records import AuditRecord, Pruned, StoredVector, VectorDelta
from agentd.store.writes import (
    AppendAudit,
    DeletePartitionEpisodes,
    InsertEpisodes,
    PruneEpisodes,
    SetVectors,
)

# records.ends_by_asking in SQL: the text ends with a question mark
ASKS_SQL = "right(rtrim(text, E' \\t\\n\\r'), 1) = '?'"
DELETIONS_KEPT = 1000  # changes whose deletions stay listed; an index further behind reloads
_BUMP = (
    "INSERT INTO episode_partitions (agent_id, partition, change) VALUES (%s, %s, 1)"
    " ON CONFLICT (agent_id, partition) DO UPDATE SET change = episode_partitions.change + 1"
)
_VECTORS = (
    f"SELECT id, created_at, importance, vector, {ASKS_SQL} FROM episodes"
    " WHERE agent_id = %s AND partition = %s AND embedder = %s AND vector IS NOT NULL"
)


@handles(InsertEpisodes)
def insert_episodes(cx: Cx, op: InsertEpisodes) -> Any:
    """Insert in order; the new ids come back in that order (the sequence numbers the rows as the
    sorted SELECT feeds them, so sorted ids are the input's order)."""
    es = op.episodes
    if not es:
        return []
    for partition in sorted({e.partition for e in es}):
        cx.run(_BUMP, (cx.agent_id, partition))
    cur = cx.run(
        "INSERT INTO episodes (agent_id, partition, conversation_key, text, importance, created_at,"
        " run_id, embedder, vector, change)"
        " SELECT %s, x.partition, x.conversation_key, x.text, x.importance, x.created_at, x.run_id,"
        " x.embedder, x.vector, p.change"
        " FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[], %s::float8[], %s::text[],"
        " %s::text[], %s::bytea[]) WITH ORDINALITY"
        " AS x(partition, conversation_key, text, importance, created_at, run_id, embedder, vector, n)"
        " JOIN episode_partitions p ON p.agent_id = %s AND p.partition = x.partition"
        " ORDER BY x.n RETURNING id",
        (
            cx.agent_id,
            [e.partition for e in es],
            [e.conversation_key for e in es],
            [e.text for e in es],
            [e.importance for e in es],
            [e.created_at for e in es],
            [e.run_id for e in es],
            [e.embedder for e in es],
            [e.vector for e in es],
            cx.agent_id,
        ),
    )
    return Later(lambda: sorted(row[0] for row in cur.fetchall()))


@handles(SetVectors)
def set_vectors(cx: Cx, op: SetVectors) -> None:
    """Late vectors; an episode already embedded keeps its vector. Its partition's counter moves."""
    if not op.vectors:
        return
    ids = [episode_id for episode_id, _ in op.vectors]
    cx.run(
        "INSERT INTO episode_partitions (agent_id, partition, change)"
        " SELECT %s, d.partition, 1 FROM (SELECT DISTINCT partition FROM episodes"
        "  WHERE agent_id = %s AND id = ANY(%s) AND vector IS NULL ORDER BY partition) d"
        " ON CONFLICT (agent_id, partition) DO UPDATE SET change = episode_partitions.change + 1",
        (cx.agent_id, cx.agent_id, ids),
    )
    cx.run(
        "UPDATE episodes e SET embedder = %s, vector = x.vector, change = p.change"
        " FROM unnest(%s::bigint[], %s::bytea[]) AS x(id, vector), episode_partitions p"
        " WHERE e.id = x.id AND e.agent_id = %s AND e.vector IS NULL"
        " AND p.agent_id = e.agent_id AND p.partition = e.partition",
        (op.embedder, ids, [blob for _, blob in op.vectors], cx.agent_id),
    )


def _vectors(found: list[tuple[Any, ...]]) -> list[StoredVector]:
    return [
        StoredVector(i, created, importance, bytes(vector), asks)
        for i, created, importance, vector, asks in found
    ]


@handles(Vectors)
def load_vectors(cx: Cx, q: Vectors) -> Later[list[StoredVector]]:
    cur = cx.run(_VECTORS + " ORDER BY id", (cx.agent_id, q.partition, q.embedder))
    return Later(lambda: _vectors(cur.fetchall()))


@handles(VectorChanges, statements=3)
def vector_changes(cx: Cx, q: VectorChanges) -> Later[VectorDelta]:
    scope = (cx.agent_id, q.partition)
    state = cx.run(
        "SELECT change, horizon FROM episode_partitions WHERE agent_id = %s AND partition = %s", scope
    )
    if q.since == 0:
        added = cx.run(_VECTORS + " ORDER BY id", (*scope, q.embedder))
    else:  # (ordered by change, the planner takes the index on it to find the few rows past `since`)
        added = cx.run(_VECTORS + " AND change > %s ORDER BY change", (*scope, q.embedder, q.since))
    removed = cx.run(
        "SELECT DISTINCT episode_id FROM episode_deletions WHERE agent_id = %s AND partition = %s"
        " AND change > %s ORDER BY episode_id",
        (*scope, q.since),
    )

    def read() -> VectorDelta:
        change, horizon = cur_row if (cur_row := state.fetchone()) is not None else (0, 0)
        rows, gone = sorted(added.fetchall()), [row[0] for row in removed.fetchall()]  # (rows: in id order)
        if q.since == 0:
            return VectorDelta(change, _vectors(rows), [])
        # behind the horizon, or ahead of the counter (the partition was erased, and maybe begun again)
        if q.since < horizon or q.since > change:
            return VectorDelta(change, [], [], complete=False)
        return VectorDelta(change, _vectors(rows), gone)

    return Later(read)


def _forget(cx: Cx, partition: str, ids: Sequence[int]) -> None:
    """List deleted ids under the partition's current change; forget listings past DELETIONS_KEPT."""
    scope = (cx.agent_id, partition)
    cx.run(
        "INSERT INTO episode_deletions (agent_id, partition, change, episode_id)"
        " SELECT p.agent_id, p.partition, p.change, x.id FROM episode_partitions p, unnest(%s::bigint[]) AS x(id)"
        " WHERE p.agent_id = %s AND p.partition = %s",
        (list(ids), *scope),
    )
    cx.run(
        "WITH cut AS (UPDATE episode_partitions SET horizon = greatest(horizon, change - %s)"
        " WHERE agent_id = %s AND partition = %s RETURNING horizon)"
        " DELETE FROM episode_deletions d USING cut"
        " WHERE d.agent_id = %s AND d.partition = %s AND d.change <= cut.horizon",
        (DELETIONS_KEPT, *scope, *scope),
    )


@handles(PruneEpisodes, reads_midway=lambda op: True)
def prune_episodes(cx: Cx, op: PruneEpisodes) -> Pruned:
    """As on SQLite: by age, then the least important (the oldest among equals) past max_episodes.
    The deleted ids are read before the batch goes on (its audit row says how many): a round trip."""
    scope = (cx.agent_id, op.partition)
    cx.run(_BUMP, scope)
    aged_cur = extra_cur = None
    if op.older_than is not None:
        aged_cur = cx.run(
            "DELETE FROM episodes WHERE agent_id = %s AND partition = %s AND created_at < %s RETURNING id",
            (*scope, op.older_than),
        )
    if op.max_episodes is not None:
        extra_cur = cx.run(
            "DELETE FROM episodes WHERE id IN (SELECT id FROM episodes WHERE agent_id = %s AND partition = %s"
            " ORDER BY importance, created_at, id LIMIT greatest(0, (SELECT count(*) FROM episodes"
            " WHERE agent_id = %s AND partition = %s) - %s)) RETURNING id",
            (*scope, *scope, op.max_episodes),
        )
    aged = sorted(row[0] for row in aged_cur.fetchall()) if aged_cur is not None else []
    extra = sorted(row[0] for row in extra_cur.fetchall()) if extra_cur is not None else []
    if aged or extra:
        _forget(cx, op.partition, aged + extra)
        data = {"partition": op.partition, "by_age": len(aged), "by_count": len(extra)}
        insert_audit(
            cx,
            AppendAudit(
                op.agent, [AuditRecord("memory", "prune_episodes", None, None, data)], op.ts, op.daemon
            ),
        )
    return Pruned(aged + extra, len(aged), len(extra))


def _delete_all(cx: Cx, partition: str) -> int:
    """Every episode of the partition, and the listing of its deletions; returns how many went."""
    scope = (cx.agent_id, partition)
    found = cx.run(
        "WITH gone AS (DELETE FROM episodes WHERE agent_id = %s AND partition = %s RETURNING 1)"
        " SELECT count(*) FROM gone",
        scope,
    ).fetchone()
    cx.run("DELETE FROM episode_deletions WHERE agent_id = %s AND partition = %s", scope)
    return int(found[0]) if found is not None else 0


def erase_partition(cx: Cx, partition: str) -> int:
    """A person's partition gone whole, its counter row too (it names them): an index of it that another
    daemon holds asks for changes past a counter the store no longer has, and reloads (vector_changes)."""
    deleted = _delete_all(cx, partition)
    cx.run("DELETE FROM episode_partitions WHERE agent_id = %s AND partition = %s", (cx.agent_id, partition))
    return deleted


@handles(DeletePartitionEpisodes, reads_midway=lambda op: True)
def delete_partition(cx: Cx, op: DeletePartitionEpisodes) -> int:
    """Every episode of one partition; an index of it from before reloads (the horizon moves past it)."""
    scope = (cx.agent_id, op.partition)
    cx.run(_BUMP, scope)
    deleted = _delete_all(cx, op.partition)
    cx.run("UPDATE episode_partitions SET horizon = change WHERE agent_id = %s AND partition = %s", scope)
    data = {"partition": op.partition, "deleted": deleted, "by": op.by}
    insert_audit(
        cx,
        AppendAudit(op.agent, [AuditRecord("memory", "delete_episodes", None, None, data)], op.ts, op.daemon),
    )
    return deleted
