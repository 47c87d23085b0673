"""Reading episodes on PostgreSQL: by id, pending, by keywords, neighbours, counts and partitions.

Keyword search is PostgreSQL full-text search: `episodes.words` is the text's tsvector ('english':
stemmed, as FTS5's porter tokenizer stems), GIN-indexed, always filtered to one partition. It is
ranked by ts_rank (how many of the question's words an episode holds, and how often, normalised by
the text's length), handed over as `KeywordHit.bm25 = -rank`: the blend in
agentd/memory/ranking.py only needs "lower is better" and the ratio to the best hit, and both hold.
bench/recall.py found recall within noise of FTS5's bm25 (ts_rank_cd ranked the same and cost twice
as much at 100k episodes; a BM25 computed in SQL ranked no better and cost far more).

Episode ids come from one sequence for every agent, so "the few hundred written around" an episode
(neighbours, replies) are counted among every agent's episodes, not only its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.store.postgres.handlers import Cx, Later, handles
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

NEIGHBOUR_WINDOW = 200  # ids searched on each side of an episode for its neighbours (as on SQLite)
# normalisation 1: divided by 1 + log(the text's length in words), as bm25 weighs long texts down
RANK = "ts_rank(words, q, 1)"
_SAME_TALK = (
    "agent_id = %s AND partition = %s AND conversation_key IS NOT DISTINCT FROM %s"
    " AND (embedder = %s OR embedder IS NULL)"
)


def _episodes(found: list[tuple[Any, ...]]) -> list[Episode]:
    return [ROW.record_of(row) for row in found]


@handles(PendingEpisodes)
def pending_episodes(cx: Cx, q: PendingEpisodes) -> Later[list[Episode]]:
    cur = cx.run(
        f"SELECT {ROW.columns} FROM episodes WHERE agent_id = %s AND partition = %s AND embedder IS NULL"
        " AND vector IS NULL ORDER BY id LIMIT %s",
        (cx.agent_id, q.partition, q.limit),
    )
    return Later(lambda: _episodes(cur.fetchall()))


@handles(Episodes)
def partition_episodes(cx: Cx, q: Episodes) -> Later[list[Episode]]:
    cur = cx.run(
        f"SELECT {ROW.columns} FROM episodes WHERE agent_id = %s AND partition = %s ORDER BY id",
        (cx.agent_id, q.partition),
    )
    return Later(lambda: _episodes(cur.fetchall()))


@handles(EpisodesById)
def get_episodes(cx: Cx, q: EpisodesById) -> Any:
    if not q.ids:
        return {}
    cur = cx.run(
        f"SELECT {ROW.columns} FROM episodes WHERE agent_id = %s AND id = ANY(%s)", (cx.agent_id, list(q.ids))
    )
    return Later(lambda: {row[0]: ROW.record_of(row) for row in cur.fetchall()})


def tsquery(terms: Sequence[str]) -> str:
    """A to_tsquery expression: each term a quoted lexeme (no query syntax from user text), OR-ed;
    to_tsquery stems them like the indexed text."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


@handles(KeywordSearch)
def keyword_search(cx: Cx, q: KeywordSearch) -> Any:
    if q.limit <= 0 or not q.terms:
        return []
    sql = (
        f"SELECT id, {RANK}, created_at, importance, vector IS NOT NULL, text, conversation_key, run_id,"
        " embedder FROM episodes, to_tsquery('english', %s) AS q"
        " WHERE agent_id = %s AND partition = %s AND words @@ q"
    )
    args: list[Any] = [tsquery(q.terms), cx.agent_id, q.partition]
    if q.embedder is not None:
        sql += " AND (embedder = %s OR embedder IS NULL)"
        args.append(q.embedder)
    cur = cx.run(sql + " ORDER BY 2 DESC, id LIMIT %s", (*args, q.limit))
    return Later(
        lambda: [
            KeywordHit(i, -rank, created, importance, embedded, text, q.partition, key, run_id, embedder)
            for i, rank, created, importance, embedded, text, key, run_id, embedder in cur.fetchall()
        ]
    )


@handles(NeighbourEpisodes, statements=2)
def neighbour_episodes(cx: Cx, q: NeighbourEpisodes) -> Later[list[list[Episode]]]:
    pairs = []
    for anchor in q.anchors:
        same = (cx.agent_id, anchor.partition, anchor.conversation_key, q.embedder)
        before = cx.run(
            f"SELECT {ROW.columns} FROM episodes WHERE id < %s AND id >= %s AND {_SAME_TALK}"
            " ORDER BY id DESC LIMIT %s",
            (anchor.id, anchor.id - NEIGHBOUR_WINDOW, *same, q.each_side),
        )
        after = cx.run(
            f"SELECT {ROW.columns} FROM episodes WHERE id > %s AND id <= %s AND {_SAME_TALK} ORDER BY id LIMIT %s",
            (anchor.id, anchor.id + NEIGHBOUR_WINDOW, *same, q.each_side),
        )
        pairs.append((before, after))
    return Later(
        lambda: [_episodes(before.fetchall()[::-1]) + _episodes(after.fetchall()) for before, after in pairs]
    )


@handles(FollowingEpisodes)
def following_episodes(cx: Cx, q: FollowingEpisodes) -> Any:
    if not q.ids:
        return {}
    cur = cx.run(
        f"SELECT a.id, {ROW.qualified('n')} FROM episodes a CROSS JOIN LATERAL ("
        f" SELECT {ROW.columns} FROM episodes b WHERE b.agent_id = a.agent_id AND b.id > a.id"
        " AND b.id <= a.id + %s AND b.partition = a.partition"
        " AND b.conversation_key IS NOT DISTINCT FROM a.conversation_key"
        " AND (b.embedder = %s OR b.embedder IS NULL) ORDER BY b.id LIMIT 1) n"
        " WHERE a.agent_id = %s AND a.id = ANY(%s)",
        (NEIGHBOUR_WINDOW, q.embedder, cx.agent_id, list(q.ids)),
    )
    return Later(lambda: {row[0]: ROW.record_of(row[1:]) for row in cur.fetchall()})


@handles(EpisodePartitions)
def episode_partitions(cx: Cx, q: EpisodePartitions) -> Later[list[str]]:
    cur = cx.run(
        "SELECT DISTINCT partition FROM episodes WHERE agent_id = %s ORDER BY partition", (cx.agent_id,)
    )
    return Later(lambda: [row[0] for row in cur.fetchall()])


@handles(EpisodeCounts)
def count_episodes(cx: Cx, q: EpisodeCounts) -> Later[dict[str, int]]:
    cur = cx.run(
        "SELECT count(*), count(*) FILTER (WHERE embedder IS NOT DISTINCT FROM %s AND vector IS NOT NULL),"
        " count(*) FILTER (WHERE vector IS NULL) FROM episodes WHERE agent_id = %s AND partition = %s",
        (q.embedder, cx.agent_id, q.partition),
    )

    def read() -> dict[str, int]:
        row = cur.fetchone()
        assert row is not None
        total, current, pending = row
        current = current if q.embedder is not None else 0
        return {
            "total": total,
            "embedded_current": current,
            "embedded_other": total - pending - current,
            "pending": pending,
        }

    return Later(read)


@handles(ConversationPartitions)
def conversation_partitions(cx: Cx, q: ConversationPartitions) -> Later[list[str]]:
    cur = cx.run(
        "SELECT DISTINCT partition FROM episodes WHERE agent_id = %s AND conversation_key = %s"
        " ORDER BY partition",
        (cx.agent_id, q.conversation_key),
    )
    return Later(lambda: [row[0] for row in cur.fetchall()])
