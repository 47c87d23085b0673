"""episodic — earlier exchanges recalled by relevance, per speaker (product.md §5).

Write: with `write: always` every exchange (the person's message and the final
assistant text of its turn) becomes an episode after the run; with `write:
tool` the model gets `save_episode` and nothing is stored on its own. Each
episode goes to the partition of the person who spoke, with the id and vector
of the embedder that read it. An embedder that is down (or absent) never loses
an episode: it is stored unembedded and embedded at the next view or settle.

Recall (`view`) searches only the speaker's partition and only vectors of the
current embedder (older embedders' episodes stay, unsearched). It is hybrid,
a normalised score blend rather than reciprocal rank fusion, because a blend
gives a score that `threshold` can mean something against:

    keyword   = 0.5 * coverage + 0.5 * bm25 / best bm25 among this query's FTS5 hits
                (0..1; 0 when not a hit; coverage: the share of the question's topical
                words the episode contains, so a one-word match stays weak even when
                it is the best there is, while bm25 adds the rarity of the words)
    relevance = 0.5 * max(cosine, 0) + 0.5 * keyword            (cosine alone when the
                                                                 question has no searchable word)
    score     = relevance * recency * (0.5 + 0.5 * importance)
    recency   = 0.5 + 0.5 * 0.5 ** (age_days / half_life_days)  (1 without half_life_days)

`threshold` filters on relevance, so age never hides an exact match: at worst
it halves the score, and an old exact match still beats a new vague one, while
among equal matches the newer wins. `top_k` caps the result. bench/recall.py
measures this against vector-only, keyword-only and RRF.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from agentd.config.models import MemorySpec
from agentd.config.strategies import EpisodicStrategy
from agentd.errors import OperatorError, ProviderError, ToolError
from agentd.memory.base import MemoryContext, MemoryView, TurnInput, speaker_partition
from agentd.memory.cursor import after_cursor, cursor_behind, layer_state
from agentd.memory.keywords import keyword_terms
from agentd.memory.runs import commit_memory_run
from agentd.memory.tooling import Tool, ToolCall, object_schema
from agentd.memory.vectors import IndexCache, IndexedVector, VectorIndex, as_blob, index_cache, top_k
from agentd.providers.base import Embedder, PromptHints, ToolSpec
from agentd.store.base import Store
from agentd.store.queries import (
    ConversationPartitions,
    EpisodeCounts,
    EpisodesById,
    KeywordSearch,
    PendingEpisodes,
    Vectors,
)
from agentd.store.records import (
    AuditRecord,
    Episode,
    KeywordHit,
    LayerState,
    NewEpisode,
    StoredMessage,
    StoredThread,
)
from agentd.store.writes import InsertEpisodes, SetVectors, Write

log = logging.getLogger(__name__)

VECTOR_WEIGHT = 0.5
KEYWORD_WEIGHT = 0.5
RECENCY_FLOOR = 0.5  # the weight of an infinitely old episode: age can halve a score, never erase it
IMPORTANCE_FLOOR = 0.5
CANDIDATES = 50  # keyword hits fetched, and vector candidates kept, before the final ranking
PART_CHARS = 2000  # of each side of an exchange kept in an episode (embedders have input limits)
MAX_SAVED_CHARS = 4000
EMBED_BATCH = 64  # texts per embed call (a long thread's first settle may hold hundreds)
SHOWN_CHARS = 1200  # of each recalled episode put in the prompt
DAY = 86400.0
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

HEADING = "Relevant earlier exchanges (recalled from memory, most relevant first; dates are UTC):"
NO_EMBEDDER = "episodic memory: no embedder configured (agentd.yaml: embedder); episodes are stored, nothing is recalled"


# -- recall -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scored:
    id: int
    score: float
    relevance: float
    cosine: float
    keyword: float
    created_at: float


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
            "created_at": s.created_at,
            "conversation_key": self.episode.conversation_key,
            "text": self.episode.text,
        }


@dataclass(slots=True)
class Recall:
    episodes: list[Recalled] = field(default_factory=list)
    mode: str = "hybrid"  # hybrid | vector | keyword | none
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Weights:
    top_k: int = 5
    threshold: float = 0.0
    half_life_days: float | None = None


def multipliers(created: Any, importance: Any, now: float, half_life_days: float | None) -> Any:
    """Per episode: importance and (with a half-life) recency weights, each in [floor, 1]."""
    weight = IMPORTANCE_FLOOR + (1 - IMPORTANCE_FLOOR) * np.clip(
        np.asarray(importance, dtype=np.float64), 0, 1
    )
    if half_life_days:
        age = np.maximum(0.0, (now - np.asarray(created, dtype=np.float64)) / DAY)
        weight = weight * (RECENCY_FLOOR + (1 - RECENCY_FLOOR) * np.power(0.5, age / half_life_days))
    return weight


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A light suffix strip, only to tell which question words an episode contains."""
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def keyword_scores(terms: Sequence[str], hits: Sequence[KeywordHit]) -> dict[int, float]:
    """Per FTS5 hit: half coverage of the question's words, half bm25 relative to the best hit."""
    best = min((h.bm25 for h in hits), default=0.0)
    wanted = {_stem(t) for t in terms}
    scores = {}
    for h in hits:
        relative = h.bm25 / best if best < 0 else 1.0
        if wanted:
            present = {_stem(w) for w in set(_WORD.findall(h.text.lower()))}
            coverage = len(wanted & present) / len(wanted)
        else:
            coverage = 1.0
        scores[h.id] = 0.5 * coverage + 0.5 * relative
    return scores


def rank(
    index: VectorIndex | None,
    query: Sequence[float] | None,
    hits: Sequence[KeywordHit] | None,
    weights: Weights,
    now: float,
    terms: Sequence[str] = (),
) -> list[Scored]:
    """Score and order candidates (exact: see the module docstring for the formula).

    `query` None: no vector side (keyword only); `hits` None: no keyword side
    (vector only, or the question had no searchable word).
    """
    keyword = keyword_scores(terms, hits or ())
    cosines = index.cosines(query) if index is not None and query is not None else np.zeros(0, np.float32)
    use_vectors, use_keywords = cosines.size > 0, hits is not None
    if use_vectors and use_keywords:
        wv, wk = VECTOR_WEIGHT, KEYWORD_WEIGHT
    else:
        wv, wk = (1.0, 0.0) if use_vectors else (0.0, 1.0)
    candidates: dict[int, tuple[float, float]] = {}  # id -> (created_at, importance)
    cos_of: dict[int, float] = {}
    if use_vectors:
        assert index is not None
        positive = np.maximum(cosines, 0.0)
        base = wv * positive * multipliers(index.created_at, index.importance, now, weights.half_life_days)
        # Outside the keyword hits a score is exactly `base`, so the best of `base` plus every hit
        # holds the true top k.
        for episode_id, _ in top_k(index.ids, base, max(weights.top_k, CANDIDATES)):
            pos = index.position(episode_id)
            assert pos is not None
            candidates[episode_id] = (float(index.created_at[pos]), float(index.importance[pos]))
            cos_of[episode_id] = float(cosines[pos])
    for h in hits or ():
        candidates.setdefault(h.id, (h.created_at, h.importance))
        if use_vectors and h.id not in cos_of:
            assert index is not None
            pos = index.position(h.id)
            cos_of[h.id] = float(cosines[pos]) if pos is not None else 0.0
    if not candidates:
        return []
    ids = list(candidates)
    factors = multipliers(
        [candidates[i][0] for i in ids], [candidates[i][1] for i in ids], now, weights.half_life_days
    )
    scored = []
    for episode_id, multiplier in zip(ids, factors, strict=True):
        cos, kw = cos_of.get(episode_id, 0.0), keyword.get(episode_id, 0.0)
        relevance = wv * max(cos, 0.0) + wk * kw
        if relevance <= 0 or relevance < weights.threshold:
            continue
        created = candidates[episode_id][0]
        scored.append(Scored(episode_id, relevance * float(multiplier), relevance, cos, kw, created))
    scored.sort(key=lambda s: (s.score, s.created_at, s.id), reverse=True)  # ties: the newer first
    return scored[: weights.top_k]


async def _embed(embedder: Embedder, texts: Sequence[str]) -> list[list[float]] | None:
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


def _indexed(episode_id: int, created_at: float, importance: float, vector: Sequence[float]) -> IndexedVector:
    return IndexedVector(episode_id, created_at, importance, as_blob(vector))


async def embed_pending(
    store: Store,
    cache: IndexCache,
    embedder_id: str,
    pending: Sequence[Episode],
    vectors: Sequence[Sequence[float]],
) -> None:
    """Record late vectors for pending episodes, then add them to the loaded indexes."""
    rows = [_indexed(e.id, e.created_at, e.importance, v) for e, v in zip(pending, vectors, strict=True)]
    await store.write(SetVectors(embedder_id, [(r.id, r.vector) for r in rows]))
    for e, row in zip(pending, rows, strict=True):
        cache.append(e.partition, embedder_id, [row])


async def load_index(store: Store, partition: str, embedder_id: str, dim: int | None = None) -> VectorIndex:
    async def loader() -> list[IndexedVector]:
        stored = await store.read(Vectors(partition, embedder_id))
        return [IndexedVector(v.id, v.created_at, v.importance, v.vector) for v in stored]

    return await index_cache(store).get(partition, embedder_id, loader, dim)


async def recall_episodes(
    store: Store,
    embedder: Embedder,
    partition: str,
    text: str,
    weights: Weights,
    now: float,
    mode: str = "hybrid",
) -> Recall:
    """Recall within one partition with the current embedder's vectors (mode: hybrid|vector|keyword).

    Embeds the partition's pending episodes first (never lost, only late), and
    costs one store read and no embedding when the partition holds nothing.
    """
    cache = index_cache(store)
    index = cache.peek(partition, embedder.id)
    if index is None:
        index = await load_index(store, partition, embedder.id)
    terms = keyword_terms(text) if mode != "vector" else []
    looks: list[Any] = [PendingEpisodes(partition)] if mode != "keyword" else []
    if terms:
        looks.append(KeywordSearch(partition, embedder.id, terms, CANDIDATES))

    async def first_look() -> tuple[list[Episode], list[KeywordHit] | None]:
        found = await store.read_many(*looks) if looks else []
        pending = found.pop(0) if mode != "keyword" else []
        return pending, (found[0] if terms else None)

    result = Recall(mode=mode)
    use_vectors = mode != "keyword"
    vectors: list[list[float]] | None = None
    if use_vectors and index.size:
        # the question will be embedded anyway: overlap that call with the store read
        (pending, hits), vectors = await asyncio.gather(first_look(), _embed(embedder, [text]))
    else:
        pending, hits = await first_look()
        if index.size == 0 and not pending and not hits:
            return result  # nothing to recall from: no embedding call either
        if use_vectors:
            vectors = await _embed(embedder, [text])
    query: list[float] | None = None
    if use_vectors and vectors is None:
        result.mode = "keyword"
        result.notes.append(f"episodic memory: embedder {embedder.id} unreachable; recalled by keywords only")
    elif vectors is not None:
        query = vectors[0]
        late = await _embed(embedder, [e.text for e in pending]) if pending else None
        if late is not None:
            await embed_pending(store, cache, embedder.id, pending, late)
        if index.dim != len(query):
            # the embedder's dimension changed under the same id: search only vectors of the new one
            index = await load_index(store, partition, embedder.id, len(query))
        if hits:
            # an episode embedded at another dimension is not searchable, by keywords either
            hits = [h for h in hits if not h.embedded or h.id in index]
    scored = rank(index if query is not None else None, query, hits, weights, now, terms)
    if not scored:
        return result
    episodes = await store.read(EpisodesById([s.id for s in scored]))
    result.episodes = [Recalled(episodes[s.id], s) for s in scored if s.id in episodes]
    return result


def recall_section(recalled: Sequence[Recalled]) -> str:
    lines = [HEADING]
    for r in recalled:
        when = datetime.fromtimestamp(r.episode.created_at, UTC).strftime("%Y-%m-%d %H:%M")
        text = r.episode.text
        if len(text) > SHOWN_CHARS:
            text = text[:SHOWN_CHARS] + "…"
        lines.append(f"[{when}] " + text.replace("\n", "\n    "))
    return "\n".join(lines)


# -- write --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exchange:
    user_id: str | None
    text: str
    run_id: str | None


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= PART_CHARS else text[:PART_CHARS] + "…"


def exchanges_of(messages: Sequence[StoredMessage]) -> list[Exchange]:
    """One exchange per person's message: their text and the last assistant text of that turn."""
    turns: list[tuple[StoredMessage, str]] = []
    for stored in messages:
        m = stored.message
        if m.role == "user":
            turns.append((stored, ""))
        elif turns and m.role == "assistant" and m.text.strip():
            turns[-1] = (turns[-1][0], m.text.strip())
    result = []
    for first, answer in turns:
        text = f"User: {_clip(first.message.text)}"
        if answer:
            text += f"\nAssistant: {_clip(answer)}"
        result.append(Exchange(first.message.user_id, text, first.run_id))
    return result


async def store_episodes(
    ctx: MemoryContext,
    episodes: Sequence[NewEpisode],
    *,
    cursor: tuple[StoredThread, str, LayerState] | None = None,
    audits: Sequence[AuditRecord] = (),
) -> list[int]:
    """Embed (first any pending episodes of the same partitions) and store, in one transaction with
    the layer's cursor or audit rows. An embedder that is down stores them unembedded."""
    embedder, store = ctx.embedder, ctx.store
    partitions = sorted({e.partition for e in episodes})
    pending: list[Episode] = []
    vectors: list[list[float]] | None = None
    if embedder is not None:
        found = await store.read_many(*(PendingEpisodes(part) for part in partitions))
        pending = [p for part in found for p in part]
        vectors = await _embed(embedder, [*(p.text for p in pending), *(e.text for e in episodes)])
    rows = list(episodes)
    late: list[tuple[Episode, list[float]]] = []
    if embedder is not None and vectors is not None:
        late = list(zip(pending, vectors[: len(pending)], strict=True))
        fresh = vectors[len(pending) :]
        rows = [
            replace(e, embedder=embedder.id, vector=as_blob(v)) for e, v in zip(episodes, fresh, strict=True)
        ]
    produced: list[Write[Any]] = [InsertEpisodes(rows)]
    if embedder is not None and late:
        produced.append(SetVectors(embedder.id, [(p.id, as_blob(v)) for p, v in late]))
    ids: list[int] = (await commit_memory_run(ctx, produced=produced, cursor=cursor, audits=audits))[0]
    if embedder is not None:
        cache = index_cache(store)
        for p, v in late:
            cache.append(p.partition, embedder.id, [_indexed(p.id, p.created_at, p.importance, v)])
        for episode_id, row in zip(ids, rows, strict=True):
            if row.vector is not None:
                cache.append(
                    row.partition,
                    embedder.id,
                    [IndexedVector(episode_id, row.created_at, row.importance, row.vector)],
                )
    return ids


# -- the strategy -------------------------------------------------------------------------


class EpisodicMemory:
    kind = "episodic"
    keeps_transcript = True

    def __init__(self, spec: EpisodicStrategy, memory: MemorySpec | None = None, layer: str = "episodic"):
        self.spec = spec
        self.layer = layer
        self.weights = Weights(spec.top_k, spec.threshold, spec.half_life_days)
        self.clock: Callable[[], float] = time.time  # tests move time to age episodes

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        if not turn.text.strip():
            return MemoryView()  # nothing to search with (the inspector's look at the next prompt)
        state = await layer_state(ctx, thread, self.layer)
        partition = speaker_partition(turn.conversation_key, turn.user_id)
        now = self.clock()
        embedder = ctx.embedder
        if embedder is None:
            state.data["last_recall"] = _recall_record(
                now, turn.text, partition, None, Recall(mode="none", notes=[NO_EMBEDDER])
            )
            return MemoryView(notes=(NO_EMBEDDER,))
        recall = await recall_episodes(ctx.store, embedder, partition, turn.text, self.weights, now)
        state.data["last_recall"] = _recall_record(now, turn.text, partition, embedder.id, recall)
        sections = (recall_section(recall.episodes),) if recall.episodes else ()
        hints = PromptHints(recalled=len(recall.episodes))
        return MemoryView(system_sections=sections, notes=tuple(recall.notes), hints=hints)

    def tools(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> Sequence[Tool]:
        if self.spec.write != "tool":
            return ()

        async def save_episode(args: dict[str, Any], call: ToolCall) -> str:
            return await self._save(ctx, args, call)

        spec = ToolSpec(
            "save_episode",
            "Save something from this conversation to long-term episodic memory, to be recalled when a "
            "later message is about it. Write it so it makes sense on its own (who, what, when).",
            object_schema(
                {
                    "text": {
                        "type": "string",
                        "description": f"what to remember, at most {MAX_SAVED_CHARS} characters",
                    },
                    "importance": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1,
                        "description": "0..1, default 1; less important episodes rank lower among equal matches",
                    },
                },
                required=["text"],
            ),
        )
        return (Tool(spec, save_episode),)

    async def _save(self, ctx: MemoryContext, args: dict[str, Any], call: ToolCall) -> str:
        text, importance = args.get("text"), args.get("importance", 1.0)
        if not isinstance(text, str) or not text.strip():
            raise ToolError("save_episode needs a non-empty 'text'")
        if len(text) > MAX_SAVED_CHARS:
            raise ToolError(f"'text' is {len(text)} characters; at most {MAX_SAVED_CHARS}")
        if (
            isinstance(importance, bool)
            or not isinstance(importance, int | float)
            or not 0 <= importance <= 1
        ):
            raise ToolError("'importance' must be a number from 0 to 1")
        partition = speaker_partition(call.conversation_key, call.user_id)
        now = self.clock()
        episode = NewEpisode(
            partition, call.conversation_key, text.strip(), now, float(importance), call.run_id
        )
        audit = AuditRecord(
            "memory", "save_episode", call.conversation_key, call.run_id, {"partition": partition}
        )
        ids = await store_episodes(ctx, [episode], audits=[audit])
        return f"Saved to episodic memory (episode {ids[0]})."

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        # recall reads episodes, never the transcript; `always` stores the exchanges after the cursor
        if self.spec.write != "always":
            return thread.next_seq
        return (await layer_state(ctx, thread, self.layer)).upto_seq + 1

    def settle_due(self, thread: StoredThread) -> bool:
        return self.spec.write == "always" and cursor_behind(thread, self.layer)

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        if self.spec.write != "always" or thread.id is None:
            return
        state = await layer_state(ctx, thread, self.layer)
        new = thread.messages[after_cursor(thread.messages, state.upto_seq) :]
        if not new:
            return
        now = self.clock()
        key = thread.conversation_key
        episodes = [
            NewEpisode(speaker_partition(key, ex.user_id), key, ex.text, now, 1.0, ex.run_id)
            for ex in exchanges_of(new)
        ]
        last_recall = state.data.get("last_recall")
        moved = LayerState({"last_recall": last_recall} if last_recall else {}, new[-1].seq)
        await store_episodes(ctx, episodes, cursor=(thread, self.layer, moved))

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        state = await layer_state(ctx, thread, self.layer)
        embedder = ctx.embedder
        embedder_id = embedder.id if embedder is not None else None
        last_recall = state.data.get("last_recall")
        partitions = await ctx.store.read(ConversationPartitions(thread.conversation_key))
        if last_recall and last_recall["partition"] not in partitions:
            partitions.append(last_recall["partition"])
        counts = await ctx.store.read_many(*(EpisodeCounts(p, embedder_id) for p in partitions))
        return {
            "kind": self.kind,
            "layer": self.layer,
            "sees": "episodes of the speaker recalled by relevance to the new message; no transcript",
            "embedder": embedder_id,
            "write": self.spec.write,
            "top_k": self.spec.top_k,
            "threshold": self.spec.threshold,
            "half_life_days": self.spec.half_life_days,
            "last_recall": last_recall,
            "episodes": dict(zip(partitions, counts, strict=True)),
        }


def _recall_record(
    now: float, query: str, partition: str, embedder: str | None, recall: Recall
) -> dict[str, Any]:
    return {
        "at": now,
        "query": query[:500],
        "partition": partition,
        "embedder": embedder,
        "mode": recall.mode,
        "notes": list(recall.notes),
        "episodes": [r.as_dict() for r in recall.episodes],
    }
