"""Writing episodes: exchanges made into episodes, embedded and stored, retention, and erasure.

An embedder that is down (or absent) never loses an episode: it is stored
unembedded and embedded at the next view or write of its partition.

Retention runs in the transaction that writes to a partition: episodes older
than `max_age_days` go, then, past `max_episodes`, the least important and
among equals the oldest. It is audited with counts (never text), and the
deleted ids leave the loaded vector indexes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentd.memory.base import MemoryContext
from agentd.memory.ranking import DAY
from agentd.memory.recall import embed_texts, indexed
from agentd.memory.runs import commit_memory_run
from agentd.memory.screening import REDACTED, SecretScreen
from agentd.memory.vectors import IndexedVector, as_blob, index_cache
from agentd.store.base import Store
from agentd.store.queries import EpisodePartitions, PendingEpisodes
from agentd.store.records import (
    AuditRecord,
    Episode,
    LayerState,
    NewEpisode,
    Pruned,
    StoredMessage,
    StoredThread,
    ends_by_asking,
)
from agentd.store.writes import (
    DeletePartitionEpisodes,
    InsertEpisodes,
    PruneEpisodes,
    SetVectors,
    Write,
)

PART_CHARS = 2000  # of each side of an exchange kept in an episode (embedders have input limits)


@dataclass(frozen=True, slots=True)
class Exchange:
    user_id: str | None
    text: str
    run_id: str | None
    sent_at: float | None = None


@dataclass(frozen=True, slots=True)
class Retention:
    """An episodic strategy's limits per partition (None: no limit)."""

    max_episodes: int | None = None
    max_age_days: float | None = None

    @property
    def limits(self) -> bool:
        return self.max_episodes is not None or self.max_age_days is not None

    def prune(self, agent: str, partition: str, now: float) -> PruneEpisodes:
        older_than = now - self.max_age_days * DAY if self.max_age_days is not None else None
        return PruneEpisodes(agent, partition, self.max_episodes, older_than, now)


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
        text = f"User: {_clip(first.message.readable)}"  # with its files' stand-ins
        if answer:
            text += f"\nAssistant: {_clip(answer)}"
        result.append(Exchange(first.message.user_id, text, first.run_id, first.message.sent_at))
    return result


async def store_episodes(
    ctx: MemoryContext,
    episodes: Sequence[NewEpisode],
    *,
    cursor: tuple[StoredThread, str, LayerState] | None = None,
    audits: Sequence[AuditRecord] = (),
    retention: Retention = Retention(),
    now: float = 0.0,
    screen: SecretScreen | None = None,
) -> list[int]:
    """Embed (first any pending episodes of the same partitions) and store, in one transaction with
    the layer's cursor or audit rows and the partitions' retention. An embedder that is down stores
    them unembedded.

    Secrets are screened out of the text before anything is embedded (agentd/memory/screening.py),
    by `screen` when the caller gives one (a tool's: under `memory.secrets: refuse` one secret found
    refuses the whole call with a ToolError; the caller reads what was found from it)."""
    embedder, store = ctx.embedder, ctx.store
    screen = screen or SecretScreen(ctx.secrets)
    episodes = [replace(e, text=screen.text(e.text, "episode")) for e in episodes]
    if screen.found:
        key = episodes[0].conversation_key
        run_ids = {e.run_id for e in episodes}
        run_id = run_ids.pop() if len(run_ids) == 1 else None
        if screen.refuses:
            raise await screen.refuse(store, ctx.agent, key, run_id)
        audits = [*audits, *screen.audits(REDACTED, key, run_id)]
    partitions = sorted({e.partition for e in episodes})
    pending: list[Episode] = []
    vectors: list[list[float]] | None = None
    if embedder is not None:
        found = await store.read_many(*(PendingEpisodes(part) for part in partitions))
        pending = [p for part in found for p in part]
        vectors = await embed_texts(embedder, [*(p.text for p in pending), *(e.text for e in episodes)])
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
    prunes = [retention.prune(ctx.agent, part, now) for part in partitions] if retention.limits else []
    committed = await commit_memory_run(ctx, produced=[*produced, *prunes], cursor=cursor, audits=audits)
    results = committed.results
    ids: list[int] = results[0]
    if embedder is not None:
        cache = index_cache(store)
        for p, v in late:
            cache.append(p.partition, embedder.id, [indexed(p, v)])
        for episode_id, row in zip(ids, rows, strict=True):
            if row.vector is not None:
                asks = ends_by_asking(row.text)
                vector = IndexedVector(episode_id, row.created_at, row.importance, row.vector, asks)
                cache.append(row.partition, embedder.id, [vector])
    _forget_pruned(store, zip(partitions, results[len(produced) :], strict=True) if prunes else ())
    return ids


def _forget_pruned(store: Store, pruned: Any) -> None:
    for partition, result in pruned:
        assert isinstance(result, Pruned)
        if result.ids:
            index_cache(store).remove(partition, result.ids)


async def sweep_retention(store: Store, agent: str, retention: Retention, now: float) -> int:
    """Apply retention to every partition of an agent's store (a periodic sweep: a partition nobody
    writes to is otherwise pruned only at its next write); returns how many episodes went."""
    if not retention.limits:
        return 0
    partitions: list[str] = await store.read(EpisodePartitions())
    if not partitions:
        return 0
    results = await store.write(*(retention.prune(agent, part, now) for part in partitions))
    _forget_pruned(store, zip(partitions, results, strict=True))
    return sum(len(result.ids) for result in results)


async def forget_partition(store: Store, agent: str, partition: str, now: float, by: str) -> int:
    """Delete every episode of one partition (e.g. `user:<id>`, a data-subject request), audited with
    the count and who asked; returns how many were deleted. Recall forgets them at once."""
    (deleted,) = await store.write(DeletePartitionEpisodes(agent, partition, by, now))
    index_cache(store).drop(partition)
    return int(deleted)
