"""Recall for a person whose accounts are linked: each account's partition is searched as it is
alone, and the best of all of them are kept, so a linked account's episodes compete on their scores.

Partitions stay per account (what a speaker says is stored in their own), so unlinking leaves every
account the episodes it wrote; only the reading spans them.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentd.memory.base import MemoryContext
from agentd.memory.recall import Recall, Recalled, Weights, recall_by_keywords, recall_episodes


async def recall_partitions(
    ctx: MemoryContext,
    partitions: Sequence[str],
    text: str,
    weights: Weights,
    now: float,
    *,
    top_k: int,
    spare: int,
) -> Recall:
    """The best `top_k` episodes (and `spare` next best) of all `partitions`, the first being the
    speaker's own; one partition is recalled exactly as before."""
    embedder = ctx.embedder
    found: list[Recall] = []
    for partition in partitions:
        if embedder is None:  # none configured: the episodes are stored unembedded, FTS5 still finds them
            recall = await recall_by_keywords(ctx.store, partition, text, weights, now, spare=spare)
        else:
            recall = await recall_episodes(ctx.store, embedder, partition, text, weights, now, spare=spare)
        found.append(recall)
    if len(found) == 1:
        return found[0]
    return _best_of(found, top_k, spare)


def _best_of(found: Sequence[Recall], top_k: int, spare: int) -> Recall:
    def ranked(items: list[Recalled]) -> list[Recalled]:
        return sorted(items, key=lambda r: r.scored.score, reverse=True)

    chosen = ranked([r for recall in found for r in recall.episodes])
    rest = ranked([*chosen[top_k:], *(r for recall in found for r in recall.spare)])
    notes = list(dict.fromkeys(n for recall in found for n in recall.notes))
    return Recall(chosen[:top_k], rest[:spare], found[0].mode, notes)
