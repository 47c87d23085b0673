"""Episodic ranking: how relevant each of a speaker's episodes is to a new message.

Hybrid, a normalised score blend rather than reciprocal rank fusion, because a
blend gives a score that `threshold` can mean something against:

    keyword   = 0.5 * coverage + 0.5 * bm25 / best bm25 among this query's FTS5 hits
                (0..1; 0 when not a hit; coverage: the share of the question's topical
                words the episode contains, so a one-word match stays weak even when
                it is the best there is, while bm25 adds the rarity of the words)
    relevance = w * max(cosine, 0) + (1 - w) * keyword       (w: vector_weight; cosine alone
                                                             when the question has no searchable word)
    score     = relevance * recency * (0.5 + 0.5 * importance) * asking * dated
    recency   = 0.5 + 0.5 * 0.5 ** (age_days / half_life_days)  (1 without half_life_days)
    asking    = question_weight for an episode whose text ends with "?", else 1
    dated     = 1 - date_weight for an episode said outside the dates the question names
                (agentd/memory/dates.py), else 1

`threshold` filters on relevance, so age never hides an exact match: at worst
it halves the score, and an old exact match still beats a new vague one, while
among equal matches the newer wins. A question ranks below the statement it asks
about (they share the words; the statement holds the answer).

With `diversity` d > 0 the top k are picked greedily: each next pick maximises
score * (1 - d * its highest cosine with an episode already picked), so a
multi-part question gets different episodes rather than five near-copies of one.

The vector side is exact: the matrix product scores every row, while the FTS5
search runs on the store thread (agentd/memory/recall.py). bench/recall.py
measures this against vector-only, keyword-only and RRF; bench/locomo.py on LoCoMo.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentd.memory.dates import Period, within
from agentd.memory.vectors import VectorIndex, top_k
from agentd.store.records import Episode, KeywordHit, ends_by_asking

RECENCY_FLOOR = 0.5  # the weight of an infinitely old episode: age can halve a score, never erase it
IMPORTANCE_FLOOR = 0.5
CANDIDATES = 50  # keyword hits fetched, and vector candidates kept, before the final ranking
DAY = 86400.0
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Scored:
    id: int
    score: float
    relevance: float
    cosine: float
    keyword: float
    created_at: float
    asks: bool = False
    answers: int | None = None  # the asking episode whose relevance this reply took over


@dataclass(frozen=True, slots=True)
class Weights:
    top_k: int = 5
    threshold: float = 0.0
    half_life_days: float | None = None
    vector_weight: float = 0.5
    question_weight: float = 1.0
    diversity: float = 0.0
    date_weight: float = 0.0
    periods: tuple[Period, ...] = ()  # dates the question names (set per question)
    max_age_days: float | None = None  # older episodes are never recalled (retention deletes them)


def multipliers(
    created: Any, importance: Any, asks: Any, now: float, weights: Weights
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Per episode: importance, asking, the question's dates and (with a half-life) recency
    weights, each in (0, 1]."""
    weight = IMPORTANCE_FLOOR + (1 - IMPORTANCE_FLOOR) * np.clip(
        np.asarray(importance, dtype=np.float64), 0, 1
    )
    if weights.question_weight < 1:
        weight = np.where(np.asarray(asks, dtype=np.bool_), weight * weights.question_weight, weight)
    if weights.periods and weights.date_weight > 0:
        inside = within(created, list(weights.periods))
        weight = np.where(inside, weight, weight * (1 - weights.date_weight))
    if weights.half_life_days:
        age = np.maximum(0.0, (now - np.asarray(created, dtype=np.float64)) / DAY)
        weight = weight * (RECENCY_FLOOR + (1 - RECENCY_FLOOR) * np.power(0.5, age / weights.half_life_days))
    if weights.max_age_days is not None:
        # past retention: out of recall at once, deleted at the partition's next write or sweep
        weight = np.where(
            np.asarray(created, dtype=np.float64) < now - weights.max_age_days * DAY, 0.0, weight
        )
    return weight


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A light suffix strip, only to tell which question words an episode contains."""
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


@functools.lru_cache(maxsize=4096)
def _stems(text: str) -> frozenset[str]:
    """The stemmed words of an episode (cached: the same episodes match question after question)."""
    return frozenset(_stem(w) for w in set(_WORD.findall(text.lower())))


def keyword_scores(terms: Sequence[str], hits: Sequence[KeywordHit]) -> dict[int, float]:
    """Per FTS5 hit: half coverage of the question's words, half bm25 relative to the best hit."""
    best = min((h.bm25 for h in hits), default=0.0)
    wanted = {_stem(t) for t in terms}
    scores = {}
    for h in hits:
        relative = h.bm25 / best if best < 0 else 1.0
        if wanted:
            coverage = len(wanted & _stems(h.text)) / len(wanted)
        else:
            coverage = 1.0
        scores[h.id] = 0.5 * coverage + 0.5 * relative
    return scores


@dataclass(frozen=True, slots=True)
class VectorSide:
    """The question's cosine with every row of the index as it was, and the best rows by base score:
    id -> (created_at, importance, asks, cosine)."""

    index: VectorIndex
    size: int  # rows scored (the index may grow meanwhile: appends land past them)
    cosines: np.ndarray[Any, np.dtype[np.float32]]
    best: dict[int, tuple[float, float, bool, float]]

    def cosine_of(self, episode_id: int) -> float:
        pos = self.index.position(episode_id)
        return float(self.cosines[pos]) if pos is not None and pos < self.size else 0.0

    def unit_rows(self, ids: Sequence[int]) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        positions = [self.index.position(i) for i in ids]
        if any(p is None or p >= self.size for p in positions):
            return None  # (a keyword hit of another dimension: no vector to compare)
        return self.index.vectors([p for p in positions if p is not None])


def vector_side(index: VectorIndex, query: Sequence[float], weights: Weights, now: float) -> VectorSide:
    """The matrix product and the vector candidates (numpy releases the GIL: may run in a thread).

    Outside the keyword hits a score is exactly `base` below, so the best of
    `base` plus every hit holds the true top k.
    """
    size = index.size  # one consistent view: every array below is cut at this many rows
    ids, created, importance, asks = (
        index.ids[:size],
        index.created_at[:size],
        index.importance[:size],
        index.asks[:size],
    )
    cosines = index.cosines(query)[:size]
    if cosines.size < size:
        return VectorSide(index, 0, np.zeros(0, np.float32), {})
    base = (
        weights.vector_weight
        * np.maximum(cosines, 0.0)
        * multipliers(created, importance, asks, now, weights)
    )
    best = {}
    for episode_id, _ in top_k(ids, base, max(weights.top_k, CANDIDATES)):
        pos = index.position(episode_id)
        assert pos is not None
        best[episode_id] = (float(created[pos]), float(importance[pos]), bool(asks[pos]), float(cosines[pos]))
    return VectorSide(index, size, cosines, best)


def score_candidates(
    vectors: VectorSide | None,
    hits: Sequence[KeywordHit] | None,
    weights: Weights,
    now: float,
    terms: Sequence[str] = (),
) -> list[Scored]:
    """Score every candidate and order them best first (see the module docstring for the formula).

    `vectors` None: no vector side (keyword only); `hits` None: no keyword side
    (vector only, or the question had no searchable word).
    """
    keyword = keyword_scores(terms, hits or ())
    use_vectors = vectors is not None and vectors.size > 0
    use_keywords = hits is not None
    if use_vectors and use_keywords:
        wv, wk = weights.vector_weight, 1.0 - weights.vector_weight
    else:
        wv, wk = (1.0, 0.0) if use_vectors else (0.0, 1.0)
    candidates = dict(vectors.best) if vectors is not None and use_vectors else {}
    for h in hits or ():
        if h.id not in candidates:
            cos = vectors.cosine_of(h.id) if vectors is not None and use_vectors else 0.0
            candidates[h.id] = (h.created_at, h.importance, ends_by_asking(h.text), cos)
    if not candidates:
        return []
    ids = list(candidates)
    rows = [candidates[i] for i in ids]
    factors = multipliers([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], now, weights)
    scored = []
    for episode_id, row, multiplier in zip(ids, rows, factors, strict=True):
        cos, kw = row[3], keyword.get(episode_id, 0.0)
        relevance = wv * max(cos, 0.0) + wk * kw
        if relevance <= 0 or relevance < weights.threshold or multiplier <= 0:
            continue
        score = relevance * float(multiplier)
        scored.append(Scored(episode_id, score, relevance, cos, kw, row[0], row[2]))
    return _ordered(scored)


def _ordered(scored: list[Scored]) -> list[Scored]:
    return sorted(scored, key=lambda s: (s.score, s.created_at, s.id), reverse=True)  # ties: the newer first


def askers(scored: Sequence[Scored], weights: Weights) -> list[int]:
    """The asking episodes near the top, whose replies may take over their relevance."""
    if weights.question_weight >= 1:
        return []
    return [s.id for s in scored[: max(3 * weights.top_k, 30)] if s.asks]


def with_replies(
    scored: list[Scored], replies: dict[int, Episode], weights: Weights, now: float
) -> list[Scored]:
    """A reply takes over the relevance of the question it follows when that is higher than its own
    (scored with its own age and importance), so the statement that answers outranks the question."""
    by_id = {s.id: s for s in scored}
    asking = {s.id: s for s in scored}
    for question_id, reply in replies.items():
        question = asking.get(question_id)
        if question is None or ends_by_asking(reply.text):
            continue
        own = by_id.get(reply.id)
        if own is not None and own.relevance >= question.relevance:
            continue
        factor = float(multipliers([reply.created_at], [reply.importance], [False], now, weights)[0])
        if factor <= 0:
            continue
        cos, kw = (own.cosine, own.keyword) if own is not None else (0.0, 0.0)
        by_id[reply.id] = Scored(
            reply.id,
            question.relevance * factor,
            question.relevance,
            cos,
            kw,
            reply.created_at,
            False,
            question_id,
        )
    return _ordered(list(by_id.values()))


def pick(scored: list[Scored], vectors: VectorSide | None, weights: Weights) -> list[Scored]:
    """The top k, spread out by `diversity` when there are vectors to compare."""
    if weights.diversity > 0 and vectors is not None and vectors.size and len(scored) > weights.top_k:
        return diverse(scored, vectors, weights.top_k, weights.diversity)
    return scored[: weights.top_k]


def diverse(scored: list[Scored], vectors: VectorSide, k: int, diversity: float) -> list[Scored]:
    """Greedy pick of k (maximal marginal relevance, multiplicative): each next one maximises
    score * (1 - diversity * its highest cosine with those already picked)."""
    pool = scored[: max(k * 4, CANDIDATES)]
    rows = vectors.unit_rows([s.id for s in pool])
    if rows is None:
        return scored[:k]
    similarity = rows @ rows.T
    scores = np.array([s.score for s in pool])
    closest = np.zeros(len(pool))
    picked: list[int] = []
    for _ in range(min(k, len(pool))):
        adjusted = scores * (1 - diversity * np.maximum(closest, 0.0))
        adjusted[picked] = -np.inf
        best = int(np.argmax(adjusted))
        picked.append(best)
        closest = np.maximum(closest, similarity[best])
    return [pool[i] for i in picked]
