"""Reading episodes: by id, pending, by keywords, neighbours, counts and partitions.

Keyword search is FTS5 (`episodes_fts`, porter stemming) ranked by bm25,
always filtered to one partition.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from agentd.store.queries import (
    ConversationPartitions,
    EpisodeCounts,
    EpisodePartitions,
    Episodes,
    EpisodesById,
    FollowingEpisodes,
    KeywordSearch,
    NeighbourEpisodes,
    PendingEpisodes,
)
from agentd.store.records import EPISODE_ROW as ROW
from agentd.store.records import Episode, KeywordHit
from agentd.store.sqlite.handlers import handles

NEIGHBOUR_WINDOW = 200  # ids searched on each side of an episode for its neighbours


@handles(PendingEpisodes)
def pending_episodes(conn: sqlite3.Connection, q: PendingEpisodes) -> list[Episode]:
    rows = conn.execute(
        # embedder IS NULL too (always true of a pending episode) lets the partition index find them
        f"SELECT {ROW.columns} FROM episodes WHERE partition = ? AND embedder IS NULL AND vector IS NULL"
        " ORDER BY id LIMIT ?",
        (q.partition, q.limit),
    ).fetchall()
    return [ROW.record_of(row) for row in rows]


@handles(Episodes)
def partition_episodes(conn: sqlite3.Connection, q: Episodes) -> list[Episode]:
    rows = conn.execute(f"SELECT {ROW.columns} FROM episodes WHERE partition = ? ORDER BY id", (q.partition,))
    return [ROW.record_of(row) for row in rows]


@handles(EpisodesById)
def get_episodes(conn: sqlite3.Connection, q: EpisodesById) -> dict[int, Episode]:
    ids = list(q.ids)
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(f"SELECT {ROW.columns} FROM episodes WHERE id IN ({marks})", ids)
    return {row[0]: ROW.record_of(row) for row in rows}


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
    for wide in (limit * 2, limit * 8):  # most often the first, narrower ranking holds them all
        ranked = conn.execute(
            "SELECT rowid, bm25(episodes_fts) AS rank FROM episodes_fts WHERE episodes_fts MATCH ?"
            " ORDER BY rank LIMIT ?",
            (match, wide),
        ).fetchall()
        hits = _episode_hits(conn, partition, embedder, ranked, limit)
        if len(hits) == limit or len(ranked) < wide:
            return hits  # exact: the partition's first `limit`, or every match was ranked
    sql = (
        f"SELECT e.id, bm25(episodes_fts) AS rank, e.{_HIT_COLUMNS.replace(', ', ', e.')}"
        " FROM episodes_fts JOIN episodes e ON e.id = episodes_fts.rowid"
        " WHERE episodes_fts MATCH ? AND e.partition = ?"
    )
    args: list[object] = [match, partition]
    if embedder is not None:
        sql += " AND (e.embedder = ? OR e.embedder IS NULL)"
        args.append(embedder)
    sql += " ORDER BY rank LIMIT ?"
    args.append(limit)
    return [_hit(row[0], row[1], partition, row[2:]) for row in conn.execute(sql, args)]


_HIT_COLUMNS = "created_at, importance, vector IS NOT NULL, text, conversation_key, run_id, embedder"


def _hit(episode_id: int, rank: float, partition: str, row: Sequence[Any]) -> KeywordHit:
    created_at, importance, embedded, text, conversation_key, run_id, embedder = row
    return KeywordHit(
        episode_id,
        rank,
        created_at,
        importance,
        bool(embedded),
        text,
        partition,
        conversation_key,
        run_id,
        embedder,
    )


def _episode_hits(
    conn: sqlite3.Connection,
    partition: str,
    embedder: str | None,
    ranked: list[tuple[int, float]],
    limit: int,
) -> list[KeywordHit]:
    """The first `limit` ranked FTS5 rows that are episodes of the partition (and embedder), in rank
    order. Rows are read a few at a time: each read loads a whole row (its vector too), and with
    one busy partition the first 2 x limit ranked hold what is wanted."""
    hits: list[KeywordHit] = []
    step = 2 * limit
    for start in range(0, len(ranked), step):
        chunk = ranked[start : start + step]
        marks = ", ".join("?" * len(chunk))
        sql = (
            f"SELECT id, {_HIT_COLUMNS} FROM episodes"
            # unary + keeps the planner on the rowid lookups (not a scan of the partition's index)
            f" WHERE id IN ({marks}) AND +partition = ?"
        )
        args: list[object] = [row[0] for row in chunk] + [partition]
        if embedder is not None:
            sql += " AND (+embedder = ? OR +embedder IS NULL)"
            args.append(embedder)
        found = {row[0]: row[1:] for row in conn.execute(sql, args)}
        hits += [_hit(i, rank, partition, found[i]) for i, rank in chunk if i in found]
        if len(hits) >= limit:
            break
    return hits[:limit]


@handles(NeighbourEpisodes)
def neighbour_episodes(conn: sqlite3.Connection, q: NeighbourEpisodes) -> list[list[Episode]]:
    # The unary + keeps the planner on the rowid range (bounded) rather than the partition's index.
    where = "+partition = ? AND +conversation_key IS ? AND (+embedder = ? OR +embedder IS NULL)"
    found = []
    for anchor in q.anchors:
        same = (anchor.partition, anchor.conversation_key, q.embedder)
        before = conn.execute(
            f"SELECT {ROW.columns} FROM episodes WHERE id < ? AND id >= ? AND {where} ORDER BY id DESC LIMIT ?",
            (anchor.id, anchor.id - NEIGHBOUR_WINDOW, *same, q.each_side),
        ).fetchall()
        after = conn.execute(
            f"SELECT {ROW.columns} FROM episodes WHERE id > ? AND id <= ? AND {where} ORDER BY id LIMIT ?",
            (anchor.id, anchor.id + NEIGHBOUR_WINDOW, *same, q.each_side),
        ).fetchall()
        found.append([ROW.record_of(row) for row in reversed(before)] + [ROW.record_of(row) for row in after])
    return found


@handles(FollowingEpisodes)
def following_episodes(conn: sqlite3.Connection, q: FollowingEpisodes) -> dict[int, Episode]:
    ids = list(q.ids)
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT a.id, {ROW.qualified('n')} FROM episodes a JOIN episodes n ON n.id = ("
        " SELECT b.id FROM episodes b WHERE b.id > a.id AND b.id <= a.id + ?"
        " AND +b.partition = a.partition AND +b.conversation_key IS a.conversation_key"
        " AND (+b.embedder = ? OR +b.embedder IS NULL) ORDER BY b.id LIMIT 1)"
        f" WHERE a.id IN ({marks})",
        (NEIGHBOUR_WINDOW, q.embedder, *ids),
    ).fetchall()
    return {row[0]: ROW.record_of(row[1:]) for row in rows}


@handles(EpisodePartitions)
def episode_partitions(conn: sqlite3.Connection, q: EpisodePartitions) -> list[str]:
    return [row[0] for row in conn.execute("SELECT DISTINCT partition FROM episodes ORDER BY partition")]


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
