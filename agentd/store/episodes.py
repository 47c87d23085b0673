"""Episodes: what was said, per speaker partition, with the vector of the embedder that read it.

An episode's `embedder` and `vector` stay NULL until it is embedded; recall
only ever reads vectors of one embedder, so vectors of different models never
mix. Keyword search is FTS5 (`episodes_fts`, porter stemming) ranked by bm25,
always filtered to one partition.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NewEpisode:
    partition: str
    conversation_key: str | None
    text: str
    created_at: float
    importance: float = 1.0
    run_id: str | None = None
    embedder: str | None = None
    vector: bytes | None = None  # float32 .tobytes(); None (with embedder None) = not embedded yet


@dataclass(frozen=True, slots=True)
class Episode:
    id: int
    partition: str
    conversation_key: str | None
    text: str
    importance: float
    created_at: float
    run_id: str | None
    embedder: str | None


@dataclass(frozen=True, slots=True)
class KeywordHit:
    id: int
    bm25: float  # FTS5 bm25: negative, lower is a better match
    created_at: float
    importance: float
    embedded: bool
    text: str


@dataclass(frozen=True, slots=True)
class StoredVector:
    id: int
    created_at: float
    importance: float
    vector: bytes


_COLUMNS = "id, partition, conversation_key, text, importance, created_at, run_id, embedder"


def insert_episodes(conn: sqlite3.Connection, episodes: Sequence[NewEpisode]) -> list[int]:
    """Insert in order; returns the new ids (the FTS index is kept in sync by triggers)."""
    ids = []
    for e in episodes:
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


def pending_episodes(conn: sqlite3.Connection, partition: str, limit: int = 64) -> list[Episode]:
    """Episodes of a partition not embedded yet (the embedder was down or absent), oldest first."""
    rows = conn.execute(
        # embedder IS NULL too (always true of a pending episode) lets the partition index find them
        f"SELECT {_COLUMNS} FROM episodes WHERE partition = ? AND embedder IS NULL AND vector IS NULL"
        " ORDER BY id LIMIT ?",
        (partition, limit),
    ).fetchall()
    return [Episode(*row) for row in rows]


def set_vectors(conn: sqlite3.Connection, embedder: str, vectors: Sequence[tuple[int, bytes]]) -> None:
    """Record the vectors of episodes embedded late; an episode already embedded keeps its vector."""
    conn.executemany(
        "UPDATE episodes SET embedder = ?, vector = ? WHERE id = ? AND vector IS NULL",
        [(embedder, blob, episode_id) for episode_id, blob in vectors],
    )


def load_vectors(conn: sqlite3.Connection, partition: str, embedder: str) -> list[StoredVector]:
    """Every vector one embedder produced for a partition, in id order (to build the index)."""
    return [
        StoredVector(*row)
        for row in conn.execute(
            "SELECT id, created_at, importance, vector FROM episodes"
            " WHERE partition = ? AND embedder = ? AND vector IS NOT NULL ORDER BY id",
            (partition, embedder),
        )
    ]


def get_episodes(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, Episode]:
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(f"SELECT {_COLUMNS} FROM episodes WHERE id IN ({marks})", list(ids))
    return {row[0]: Episode(*row) for row in rows}


# Words that carry no topic: dropped from keyword queries so "what did I say about X" searches X.
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves tell remind know remember said say says told please again earlier ago""".split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_QUERY_TERMS = 24


def keyword_terms(text: str) -> list[str]:
    """The topical words of free text, lower-cased, in order, without repeats or stopwords."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or (len(word) < 2 and not word.isdigit()) or word in terms:
            continue
        terms.append(word)
        if len(terms) == MAX_QUERY_TERMS:
            break
    return terms


def keyword_query(text: str) -> str | None:
    """An FTS5 MATCH expression for free text: its topical words, each quoted, OR-ed; None if none.

    Quoting makes every word a plain term (no FTS syntax from user text), and
    FTS5's porter tokenizer stems the query like the indexed text.
    """
    return " OR ".join(f'"{t}"' for t in keyword_terms(text)) or None


def keyword_search(
    conn: sqlite3.Connection, partition: str, embedder: str | None, match: str, limit: int
) -> list[KeywordHit]:
    """The best bm25 matches within one partition, among episodes of `embedder` or not embedded yet
    (embedder None: every episode of the partition).

    bm25 does not depend on the partition (its statistics are the whole
    table's), so the partition's best matches are the first of the table's
    that belong to it: rank the table's best few hundred in FTS5 alone (no
    join per match: twice as fast at 100k episodes), and only when too few
    of those are this partition's, rank every match of the partition.
    """
    if limit <= 0:
        return []
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


def count_episodes(conn: sqlite3.Connection, partition: str, embedder: str | None) -> dict[str, int]:
    """A partition's episodes: total, embedded by `embedder`, by other embedders, not embedded yet."""
    total, current, pending = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(embedder IS ? AND vector IS NOT NULL), 0),"
        " COALESCE(SUM(vector IS NULL), 0) FROM episodes WHERE partition = ?",
        (embedder, partition),
    ).fetchone()
    return {
        "total": total,
        "embedded_current": current if embedder is not None else 0,
        "embedded_other": total - pending - (current if embedder is not None else 0),
        "pending": pending,
    }


def conversation_partitions(conn: sqlite3.Connection, conversation_key: str) -> list[str]:
    """The partitions episodes of one conversation went to (one per person who spoke there)."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT partition FROM episodes WHERE conversation_key = ? ORDER BY partition",
            (conversation_key,),
        )
    ]
