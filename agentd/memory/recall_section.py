"""What the model is shown of a recall: each recalled episode with the exchange around it, in a budget.

A recalled episode rarely stands alone: the answer to "what did she recommend?"
often sits in the reply right after the episode that matched, and a question
that matched needs the message that answered it. So each recalled episode comes
with up to `neighbours` episodes said just before and after it in the same
conversation, read as one snippet in the order they were said.

The k recalled are k different places: one that lies within `neighbours` of a
better one is shown as its neighbour, and the next best (`spare`) takes its place.

Everything shown fits in `recall_tokens` (estimated as characters / 4), filled
in order of priority: a recalled episode of rank r, and a neighbour d steps
from it as if it ranked r + d, so the exchange around the best match comes
before a much weaker match (an episode that does not fit is left out, a shorter
one after it may still fit; a neighbour is never shown past one left out).
Snippets are listed most relevant first; a line shows when it was said (UTC),
once per snippet and again when the day changes, so "when did ..." can be
answered from the prompt. They are quoted in one remembered block (data, not
instructions: agentd/providers/remembered.py); the budget is the heading and
the episodes, not the block's fixed framing. Measured on LoCoMo (bench/locomo.py): with 1,000
tokens, ±2 neighbours in this order find more evidence than ±1, and far more
than the top k alone or than all recalled before any neighbour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from agentd.memory.recall import Recalled
from agentd.messages import CHARS_PER_TOKEN
from agentd.providers.remembered import remembered_block
from agentd.store.base import Store
from agentd.store.queries import NeighbourEpisodes
from agentd.store.records import Episode

HEADING = "Relevant earlier exchanges (recalled from memory, most relevant first; dates are UTC)."
SOURCE = "episodes"
SHOWN_CHARS = 1200  # of one episode


@dataclass(frozen=True, slots=True)
class Shown:
    """The section's text and how many episodes it holds (recalled, and neighbours added)."""

    text: str
    recalled: int
    neighbours: int


def _clipped(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _stamp(created_at: float) -> str:
    return datetime.fromtimestamp(created_at, UTC).strftime("%Y-%m-%d %H:%M")


def _cost(episode: Episode) -> int:
    """Characters one episode takes in the section at most (its stamp, text and line break)."""
    return len(_clipped(episode.text)) + 20 + episode.text.count("\n") * 4


async def shown_recall(
    store: Store,
    recalled: Sequence[Recalled],
    neighbours: int,
    recall_tokens: int,
    embedder: str | None,
    spare: Sequence[Recalled] = (),
) -> Shown:
    """The section for recalled episodes (best first) with up to `neighbours` on each side of each
    (episodes of `embedder` or not embedded yet), all within `recall_tokens`.

    A recalled episode that is a neighbour of a better one is shown as such, and the next of
    `spare` takes its place among the recalled: k recalled episodes are k different places.
    """
    anchors, around = await _distinct_places(store, [*recalled, *spare], len(recalled), neighbours, embedder)
    # In order of priority: a recalled episode by its rank r, its neighbour d steps away as if it
    # ranked r + d (the exchange around the best match before a much weaker match).
    order: list[tuple[int, int, Episode, Episode | None]] = []
    for rank, (anchor, near) in enumerate(zip(anchors, around, strict=True)):
        order.append((rank, 0, anchor, None))
        for side in _sides(anchor, near):
            for distance, episode in enumerate(side, start=1):
                order.append(
                    (rank + distance, distance, episode, side[distance - 2] if distance > 1 else anchor)
                )
    order.sort(key=lambda item: (item[0], item[1]))
    budget = recall_tokens * CHARS_PER_TOKEN - len(HEADING)
    chosen: dict[int, Episode] = {}
    added = 0
    for _, _, episode, inner in order:
        if episode.id in chosen or _cost(episode) > budget:
            continue
        if inner is not None and inner.id not in chosen:
            continue  # never past one left out: a snippet has no gaps
        budget -= _cost(episode)
        chosen[episode.id] = episode
        added += inner is not None
    kept = [at for at, anchor in enumerate(anchors) if anchor.id in chosen]
    snippets = _snippets([anchors[at] for at in kept], chosen, [around[at] for at in kept])
    return Shown(_render(snippets), len(kept), added)


async def _distinct_places(
    store: Store, ranked: Sequence[Recalled], wanted: int, neighbours: int, embedder: str | None
) -> tuple[list[Episode], list[list[Episode]]]:
    """Up to `wanted` of the ranked episodes, best first, none within `neighbours` of a better one
    (it would be shown as its neighbour), each with its neighbours."""
    anchors: list[Episode] = []
    around: list[list[Episode]] = []
    covered: set[int] = set()
    queue = [r.episode for r in ranked]
    while queue and len(anchors) < wanted:
        batch, queue = queue[: wanted - len(anchors)], queue[wanted - len(anchors) :]
        near_batch: list[list[Episode]] = [[] for _ in batch]
        if neighbours:
            near_batch = await store.read(NeighbourEpisodes(batch, neighbours, embedder))
        for episode, near in zip(batch, near_batch, strict=True):
            if episode.id not in covered:
                anchors.append(episode)
                around.append(near)
                covered.update(e.id for e in (episode, *near))
    return anchors, around


def _sides(anchor: Episode, near: Sequence[Episode]) -> tuple[list[Episode], list[Episode]]:
    """The neighbours before the anchor and after it, each nearest first (near: in id order)."""
    return [e for e in reversed(near) if e.id < anchor.id], [e for e in near if e.id > anchor.id]


def _snippets(
    anchors: Sequence[Episode], chosen: dict[int, Episode], around: Sequence[Sequence[Episode]]
) -> list[list[Episode]]:
    """Each anchor with the chosen neighbours joined to it; snippets that touch are one; the
    snippet of the best-ranked anchor first, each in the order it was said."""
    root = {i: i for i in chosen}

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for at, anchor in enumerate(anchors):
        for side in _sides(anchor, around[at] if at < len(around) else ()):
            previous = anchor.id
            for episode in side:
                if episode.id not in chosen:
                    break
                root[find(episode.id)] = find(previous)
                previous = episode.id
    first_rank: dict[int, int] = {}
    for at, anchor in enumerate(anchors):
        first_rank.setdefault(find(anchor.id), at)
    groups: dict[int, list[Episode]] = {}
    for episode_id, episode in chosen.items():
        groups.setdefault(find(episode_id), []).append(episode)
    return [sorted(groups[g], key=lambda e: e.id) for g in sorted(groups, key=lambda g: first_rank[g])]


def _render(snippets: Sequence[Sequence[Episode]]) -> str:
    """The snippets quoted in one remembered block (data, not instructions)."""
    if not snippets:
        return ""
    lines: list[str] = []
    for snippet in snippets:
        day = None
        for episode in snippet:
            stamp = _stamp(episode.created_at)
            text = _clipped(episode.text).replace("\n", "\n    ")
            if stamp[:10] != day:
                lines.append(f"[{stamp}] {text}")
                day = stamp[:10]
            else:
                lines.append(f"  {text}")
    return remembered_block(SOURCE, HEADING, "\n".join(lines))
