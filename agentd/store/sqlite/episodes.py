"""Episodes: what was said, per speaker partition, with the vector of the embedder that read it.

An episode's `embedder` and `vector` stay NULL until it is embedded; recall
only ever reads vectors of one embedder, so vectors of different models never
mix. Keyword search is FTS5 (`episodes_fts`, porter stemming) ranked by bm25,
always filtered to one partition.
"""

from __future__ import annotations

import sqlite3

from agentd.store.queries import (
    ConversationPartitions,
    EpisodeCounts,
    EpisodesById,
    KeywordSearch,
    PendingEpisodes,
    Vectors,
)
from agentd.store.records import Episode, KeywordHit, StoredVector
from agentd.store.sqlite.dispatch import handles
from agentd.store.writes import InsertEpisodes, SetVectors

_COLUMNS = "id, partition, conversation_key, text, importance, created_at, run_id, embedder"


@handles(InsertEpisodes)
def insert_episodes(conn: sqlite3.Connection, op: InsertEpisodes) -> list[int]:
    """Insert in order; returns the new ids (the FTS index is kept in sync by triggers)."""
    ids = []
    for e in op.episodes:
        cur = conn.execute(
            "INSERT INTO episodes (partition, conversation_key, text, importance, created_at, run_id,"
            " embedder, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                e.partition,
                e.conversation_key,
                e.text,
                e.importance,
                e.created_at,
                e.run_id,
                e.embedder,
                e.vector,
            ),
        )
        assert cur.lastrowid is not None
        ids.append(cur.lastrowid)
    return ids


@handles(PendingEpisodes)
def pending_episodes(conn: sqlite3.Connection, q: PendingEpisodes) -> list[Episode]:
    rows = conn.execute(
        # embedder IS NULL too (always true of a pending episode) lets the partition index find them
        f"SELECT {_COLUMNS} FROM episodes WHERE partition = ? AND embedder IS NULL AND vector IS NULL"
        " ORDER BY id LIMIT ?",
        (q.partition, q.limit),
    ).fetchall()
    return [Episode(*row) for row in rows]


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
            "SELECT id, created_at, importance, vector FROM episodes"
            " WHERE partition = ? AND embedder = ? AND vector IS NOT NULL ORDER BY id",
            (q.partition, q.embedder),
        )
    ]


@handles(EpisodesById)
def get_episodes(conn: sqlite3.Connection, q: EpisodesById) -> dict[int, Episode]:
    ids = list(q.ids)
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(f"SELECT {_COLUMNS} FROM episodes WHERE id IN ({marks})", ids)
    return {row[0]: Episode(*row) for row in rows}


def fts_match(terms: list[str] | tuple[str, ...]) -> str:
    """An FTS5 MATCH expression: each term quoted (no FTS syntax from user text), OR-ed. FTS5's porter
    tokenizer stems the query like the indexed text."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


@handles(KeywordSearch)
def keyword_search(conn: sqlite3.Connection, q: KeywordSearch) -> list[KeywordHit]:
    """bm25 does not depend on the partition (its statistics are the whole
    table's), so the partition's best matches are the first of the table's
    that belong to it: rank the table's best few hundred in FTS5 alone (no
    join per match: twice as fast at 100k episodes), and only when too few
    of those are this partition's, rank every match of the partition.
    """
    partition, embedder, limit = q.partition, q.embedder, q.limit
    if limit <= 0 or not q.terms:
        return []
    match = fts_match(tuple(q.terms))
    wide = limit * 8
    ranked = conn.execute(
        "SELECT rowid, bm25(episodes_fts) AS rank FROM episodes_fts WHERE episodes_fts MATCH ?"
        " ORDER BY rank LIMIT ?",
        (match, wide),
    ).fetchall()
    hits = _episode_hits(conn, partition, embedder, ranked)[:limit]
    if len(hits) == limit or len(ranked) < wide:
        return hits  # exact: the partition's first `limit`, or every match was ranked
    sql = (
        "SELECT e.id, bm25(episodes_fts) AS rank, e.created_at, e.importance, e.vector IS NOT NULL, e.text"
        " FROM episodes_fts JOIN episodes e ON e.id = episodes_fts.rowid"
        " WHERE episodes_fts MATCH ? AND e.partition = ?"
    )
    args: list[object] = [match, partition]
    if embedder is not None:
        sql += " AND (e.embedder = ? OR e.embedder IS NULL)"
        args.append(embedder)
    sql += " ORDER BY rank LIMIT ?"
    args.append(limit)
    return [KeywordHit(i, r, c, imp, bool(v), t) for i, r, c, imp, v, t in conn.execute(sql, args)]


def _episode_hits(
    conn: sqlite3.Connection, partition: str, embedder: str | None, ranked: list[tuple[int, float]]
) -> list[KeywordHit]:
    """The ranked FTS5 rows that are episodes of the partition (and embedder), in rank order."""
    if not ranked:
        return []
    marks = ", ".join("?" * len(ranked))
    sql = (
        "SELECT id, created_at, importance, vector IS NOT NULL, text FROM episodes"
        # unary + keeps the planner on the rowid lookups (not a scan of the partition's index)
        f" WHERE id IN ({marks}) AND +partition = ?"
    )
    args: list[object] = [row[0] for row in ranked] + [partition]
    if embedder is not None:
        sql += " AND (+embedder = ? OR +embedder IS NULL)"
        args.append(embedder)
    found = {i: (c, imp, bool(v), t) for i, c, imp, v, t in conn.execute(sql, args)}
    return [KeywordHit(i, rank, *found[i]) for i, rank in ranked if i in found]


@handles(EpisodeCounts)
def count_episodes(conn: sqlite3.Connection, q: EpisodeCounts) -> dict[str, int]:
    embedder = q.embedder
    total, current, pending = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(embedder IS ? AND vector IS NOT NULL), 0),"
        " COALESCE(SUM(vector IS NULL), 0) FROM episodes WHERE partition = ?",
        (embedder, q.partition),
    ).fetchone()
    return {
        "total": total,
        "embedded_current": current if embedder is not None else 0,
        "embedded_other": total - pending - (current if embedder is not None else 0),
        "pending": pending,
    }


@handles(ConversationPartitions)
def conversation_partitions(conn: sqlite3.Connection, q: ConversationPartitions) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT partition FROM episodes WHERE conversation_key = ? ORDER BY partition",
            (q.conversation_key,),
        )
    ]
