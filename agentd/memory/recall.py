"""Episodic recall: the top k of a speaker's episodes for a new message, end to end.

Hands the FTS5 search to the store thread first, then embeds the question and
runs the matrix product meanwhile (on the loop up to INLINE_ROWS rows, in a
worker thread beyond: numpy releases the GIL), so the two overlap; then ranks
(agentd/memory/ranking.py), lets replies take over the relevance of the
questions they answer, and reads the texts. An embedder that is down degrades
recall to keywords; episodes it missed are embedded at the next recall. On a
store several daemons share, that first read also asks what the others wrote
or deleted in the partition since the cached index was read (VectorChanges),
and the index takes it in before it is scored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread

from agentd.errors import OperatorError, ProviderError
from agentd.memory.dates import mentioned_periods
from agentd.memory.keywords import keyword_terms
from agentd.memory.ranking import (
    CANDIDATES,
    Scored,
    VectorSide,
    Weights,
    askers,
    pick,
    score_candidates,
    vector_side,
    with_replies,
)
from agentd.memory.vectors import IndexCache, IndexedVector, VectorIndex, as_blob, index_cache
from agentd.providers.base import Embedder
from agentd.store.base import Store
from agentd.store.queries import (
    EpisodesById,
    FollowingEpisodes,
    KeywordSearch,
    PendingEpisodes,
    VectorChanges,
)
from agentd.store.records import Episode, KeywordHit, VectorDelta, ends_by_asking
from agentd.store.writes import SetVectors

log = logging.getLogger(__name__)

INLINE_ROWS = 20_000  # up to ~1 ms of matrix product runs on the event loop; more goes to a thread
EMBED_BATCH = 64  # texts per embed call (a long thread's first settle may hold hundreds)

__all__ = ["Recall", "Recalled", "Scored", "Weights", "load_index", "recall_episodes"]


@dataclass(frozen=True, slots=True)
class Recalled:
    episode: Episode
    scored: Scored

    def as_dict(self) -> dict[str, Any]:
        s = self.scored
        return {
            "id": s.id,
            "score": round(s.score, 4),
            "relevance": round(s.relevance, 4),
            "cosine": round(s.cosine, 4),
            "keyword": round(s.keyword, 4),
            "answers": s.answers,
            "created_at": s.created_at,
            "conversation_key": self.episode.conversation_key,
            "text": self.episode.text,
        }


@dataclass(slots=True)
class Recall:
    episodes: list[Recalled] = field(default_factory=list)
    # the next best after the top k, in order: they step in for a recalled episode that is
    # already shown as the neighbour of a better one
    spare: list[Recalled] = field(default_factory=list)
    mode: str = "hybrid"  # hybrid | vector | keyword | none
    notes: list[str] = field(default_factory=list)


async def embed_texts(embedder: Embedder, texts: Sequence[str]) -> list[list[float]] | None:
    """Vectors for texts, or None when the embedder cannot answer now (the caller degrades)."""
    vectors: list[list[float]] = []
    try:
        for start in range(0, len(texts), EMBED_BATCH):
            vectors += await embedder.embed(list(texts[start : start + EMBED_BATCH]))
    except (ProviderError, OperatorError) as e:
        log.warning("embedder %s failed (episodes wait, unembedded, for the next try): %s", embedder.id, e)
        return None
    if len(vectors) != len(texts):
        log.warning("embedder %s returned %d vectors for %d texts", embedder.id, len(vectors), len(texts))
        return None
    return vectors


def indexed(episode: Episode, vector: Sequence[float]) -> IndexedVector:
    return IndexedVector(
        episode.id, episode.created_at, episode.importance, as_blob(vector), ends_by_asking(episode.text)
    )


async def embed_pending(
    store: Store,
    cache: IndexCache,
    embedder_id: str,
    pending: Sequence[Episode],
    vectors: Sequence[Sequence[float]],
) -> None:
    """Record late vectors for pending episodes, then add them to the loaded indexes."""
    rows = [indexed(e, v) for e, v in zip(pending, vectors, strict=True)]
    await store.write(SetVectors(embedder_id, [(r.id, r.vector) for r in rows]))
    for e, row in zip(pending, rows, strict=True):
        cache.append(e.partition, embedder_id, [row])


async def load_index(store: Store, partition: str, embedder_id: str, dim: int | None = None) -> VectorIndex:
    change = 0

    async def loader() -> list[IndexedVector]:
        nonlocal change
        every = await store.read(VectorChanges(partition, embedder_id, 0))  # (and the change it is at)
        change = every.change
        return [IndexedVector(v.id, v.created_at, v.importance, v.vector, bool(v.asks)) for v in every.added]

    index = await index_cache(store).get(partition, embedder_id, loader, dim)
    index.change = max(index.change, change)
    return index


async def recall_episodes(
    store: Store,
    embedder: Embedder,
    partition: str,
    text: str,
    weights: Weights,
    now: float,
    mode: str = "hybrid",
    spare: int = 0,
) -> Recall:
    """Recall within one partition with the current embedder's vectors (mode: hybrid|vector|keyword);
    `spare`: how many of the next best to return besides the top k.

    Embeds the partition's pending episodes first (never lost, only late), and
    costs one store read and no embedding when the partition holds nothing.
    """
    periods = tuple(mentioned_periods(text)) if weights.date_weight > 0 else ()
    if periods:
        weights = replace(weights, periods=periods)
    cache = index_cache(store)
    index = cache.peek(partition, embedder.id)
    # on a shared store, a cached index also asks what other daemons changed since it was read
    changes = VectorChanges(partition, embedder.id, index.change) if index and store.shared else None
    if index is None:
        index = await load_index(store, partition, embedder.id)
    terms = keyword_terms(text) if mode != "vector" else []
    use_vectors = mode != "keyword"
    looks: list[Any] = [PendingEpisodes(partition)] if use_vectors else []
    if terms:
        looks.append(KeywordSearch(partition, embedder.id, terms, CANDIDATES))
    if changes is not None:
        looks.append(changes)

    async def first_look() -> tuple[list[Episode], list[KeywordHit] | None, VectorDelta | None]:
        found = await store.read_many(*looks) if looks else []
        pending = found.pop(0) if use_vectors else []
        delta = found.pop() if changes is not None else None
        return pending, (found[0] if terms else None), delta

    result = Recall(mode=mode)
    look = asyncio.ensure_future(first_look())
    await asyncio.sleep(0)  # let it hand its read to the store thread: FTS5 runs from now, in parallel
    vectors: list[list[float]] | None = None
    side: VectorSide | None = None
    embedded = False  # whether the question was sent to the embedder (once, even if it failed)
    try:
        if use_vectors and index.size:
            vectors, embedded = await embed_texts(embedder, [text]), True
            if vectors is not None and index.dim == len(vectors[0]):
                if index.size <= INLINE_ROWS:  # a small product: here, while the store thread searches
                    side = vector_side(index, vectors[0], weights, now)
                else:  # a big one in a worker thread (numpy releases the GIL): the loop keeps serving
                    side = await anyio.to_thread.run_sync(vector_side, index, vectors[0], weights, now)
        pending, hits, delta = await look
    finally:
        look.cancel()  # (a no-op once it is done)
    if delta is not None and cache.catch_up(partition, embedder.id, delta):
        side = None  # scored before the index took in other daemons' changes: scored again below
        if cache.peek(partition, embedder.id) is not index:  # dropped: changed past what is listed
            index = await load_index(store, partition, embedder.id)
    if index.size == 0 and not pending and not hits:
        return result  # nothing to recall from: no embedding call either
    if use_vectors and not embedded:
        vectors = await embed_texts(embedder, [text])
    if use_vectors and vectors is None:
        result.mode = "keyword"
        result.notes.append(f"episodic memory: embedder {embedder.id} unreachable; recalled by keywords only")
    elif vectors is not None:
        query = vectors[0]
        late = await embed_texts(embedder, [e.text for e in pending]) if pending else None
        if late is not None:
            await embed_pending(store, cache, embedder.id, pending, late)
        if index.dim != len(query):
            # the embedder's dimension changed under the same id: search only vectors of the new one
            index = await load_index(store, partition, embedder.id, len(query))
        if side is None or late:
            side = vector_side(index, query, weights, now)
        if hits:
            # an episode embedded at another dimension is not searchable, by keywords either
            hits = [h for h in hits if not h.embedded or h.id in index]
    scored = score_candidates(side, hits, weights, now, terms)
    return await _top(store, result, scored, side, hits, weights, now, embedder.id, spare)


async def recall_by_keywords(
    store: Store, partition: str, text: str, weights: Weights, now: float, spare: int = 0
) -> Recall:
    """Recall with no embedder configured: FTS5's keyword score alone over every episode of the
    partition (they are stored unembedded), ranked, dated and answered by replies as in hybrid recall."""
    periods = tuple(mentioned_periods(text)) if weights.date_weight > 0 else ()
    if periods:
        weights = replace(weights, periods=periods)
    result = Recall(mode="keyword")
    terms = keyword_terms(text)
    if not terms:
        return result
    hits = await store.read(KeywordSearch(partition, None, terms, CANDIDATES))
    if not hits:
        return result
    scored = score_candidates(None, hits, weights, now, terms)
    return await _top(store, result, scored, None, hits, weights, now, None, spare)


async def _top(
    store: Store,
    result: Recall,
    scored: list[Scored],
    side: VectorSide | None,
    hits: Sequence[KeywordHit] | None,
    weights: Weights,
    now: float,
    embedder_id: str | None,
    spare: int,
) -> Recall:
    """The top k (and `spare` more) of the scored candidates, replies taking over their questions,
    with their texts."""
    asking = askers(scored, weights)
    if asking:
        replies = await store.read(FollowingEpisodes(asking, embedder_id))
        scored = with_replies(scored, replies, weights, now)
    scored = pick(scored, side, replace(weights, top_k=weights.top_k + spare))
    if not scored:
        return result
    picked = {s.id for s in scored}
    episodes: dict[int, Episode] = {h.id: h.episode() for h in hits or () if h.id in picked}
    missing = [s.id for s in scored if s.id not in episodes]
    if missing:  # vector-only picks: their texts are one read away (keyword hits carry theirs)
        read: dict[int, Episode] = await store.read(EpisodesById(missing))
        episodes.update(read)
    found = [Recalled(episodes[s.id], s) for s in scored if s.id in episodes]
    result.episodes, result.spare = found[: weights.top_k], found[weights.top_k :]
    return result
