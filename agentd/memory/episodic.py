"""episodic — earlier exchanges recalled by relevance, per speaker (product.md §5).

Write: with `write: always` every exchange (the person's message and the final
assistant text of its turn) becomes an episode after the run; with `write:
tool` the model gets `save_episode` and nothing is stored on its own. Each
episode goes to the partition of the person who spoke, with the id and vector
of the embedder that read it. An embedder that is down (or absent) never loses
an episode: it is stored unembedded and embedded at the next view or settle.

Recall (`view`) searches only the speaker's partition and only vectors of the
current embedder (older embedders' episodes stay, unsearched): the pipeline in
agentd/memory/recall.py, the scores in agentd/memory/ranking.py, and what the
model is shown (neighbours, the token budget) in agentd/memory/recall_section.py.

Episodes carry the time the person said them when the channel tells it
(`sent_at`), else the time they were stored. Retention (`max_episodes`,
`max_age_days`) runs in the same transaction as each write to a partition and
is audited with counts, never text (agentd/memory/episode_writes.py, which also
deletes one person's episodes on request). `/reset` deletes a conversation's
transcript, not the episodes already made of it: they are the person's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from agentd.config.models import MemorySpec
from agentd.config.strategies import EpisodicStrategy
from agentd.errors import ToolError
from agentd.memory.base import MemoryContext, MemoryView, TurnInput, linked_partitions, speaker_partition
from agentd.memory.cursor import after_cursor, cursor_behind, layer_state
from agentd.memory.episode_writes import Retention, exchanges_of, store_episodes, sweep_retention
from agentd.memory.erasure import Erasure
from agentd.memory.person_recall import recall_partitions
from agentd.memory.recall import Recall, Weights
from agentd.memory.recall_section import shown_recall
from agentd.memory.screening import SecretScreen
from agentd.providers.base import PromptHints, ToolSpec
from agentd.store.queries import ConversationPartitions, EpisodeCounts
from agentd.store.records import AuditRecord, LayerState, NewEpisode, StoredThread
from agentd.tools.base import Tool, ToolCall, object_schema

MAX_SAVED_CHARS = 4000
NO_EMBEDDER = "episodic memory: no embedder configured (agentd.yaml: embedder); recalled by keywords only"


# -- the strategy -------------------------------------------------------------------------


class EpisodicMemory:
    kind = "episodic"
    # the last recall quotes the query and the episodes it found (the inspector shows it): an erasure
    # drops it and keeps the cursor (the episodes themselves are erased by partition)
    LAYER_KEYS: ClassVar[Mapping[str, Erasure]] = {"last_recall": Erasure.DROP}
    keeps_transcript = True

    def __init__(self, spec: EpisodicStrategy, memory: MemorySpec | None = None, layer: str = "episodic"):
        self.spec = spec
        self.layer = layer
        self.weights = Weights(
            spec.top_k,
            spec.threshold,
            spec.half_life_days,
            spec.vector_weight,
            spec.question_weight,
            spec.diversity,
            spec.date_weight,
            max_age_days=spec.max_age_days,
        )
        self.retention = Retention(spec.max_episodes, spec.max_age_days)
        self.clock: Callable[[], float] = time.time  # tests move time to age episodes

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        if not turn.text.strip():
            return MemoryView()  # nothing to search with (the inspector's look at the next prompt)
        state = await layer_state(ctx, thread, self.layer)
        partition = speaker_partition(turn.conversation_key, turn.user_id)
        now = self.clock()
        embedder = ctx.embedder
        embedder_id = embedder.id if embedder is not None else None
        started = time.perf_counter()
        spare = 2 * self.spec.top_k if self.spec.neighbours else 0
        # a person with linked accounts recalls from each account's partition (agentd/memory/person_recall.py)
        partitions = [partition, *linked_partitions(turn.linked)] if turn.user_id else [partition]
        recall = await recall_partitions(
            ctx, partitions, turn.text, self.weights, now, top_k=self.spec.top_k, spare=spare
        )
        if embedder is None:
            recall.notes.append(NO_EMBEDDER)
        shown = await shown_recall(
            ctx.store,
            recall.episodes,
            self.spec.neighbours,
            self.spec.recall_tokens,
            embedder_id,
            recall.spare,
        )
        record = _recall_record(now, turn.text, partition, embedder_id, recall)
        record["neighbours_shown"] = shown.neighbours
        record["took_ms"] = round((time.perf_counter() - started) * 1000, 3)
        state.data["last_recall"] = record
        sections = (shown.text,) if shown.text else ()
        hints = PromptHints(recalled=shown.recalled + shown.neighbours)
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
        return (Tool(spec, save_episode, private_args=frozenset({"text"})),)  # memories stay out of the audit

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
        said = call.sent_at if call.sent_at is not None else now
        episode = NewEpisode(
            partition, call.conversation_key, text.strip(), said, float(importance), call.run_id
        )
        audit = AuditRecord(
            "memory", "save_episode", call.conversation_key, call.run_id, {"partition": partition}
        )
        screen = SecretScreen(ctx.secrets, tool="save_episode")
        ids = await store_episodes(
            ctx, [episode], audits=[audit], retention=self.retention, now=now, screen=screen
        )
        return f"Saved to episodic memory (episode {ids[0]})." + screen.note()

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        # recall reads episodes, never the transcript; `always` stores the exchanges after the cursor
        if self.spec.write != "always":
            return thread.next_seq
        return (await layer_state(ctx, thread, self.layer)).upto_seq + 1

    async def sweep(self, ctx: MemoryContext, now: float) -> int:
        return await sweep_retention(ctx.store, ctx.agent, self.retention, now)

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
            NewEpisode(
                speaker_partition(key, ex.user_id),
                key,
                ex.text,
                ex.sent_at if ex.sent_at is not None else now,
                1.0,
                ex.run_id,
            )
            for ex in exchanges_of(new)
        ]
        last_recall = state.data.get("last_recall")
        moved = LayerState({"last_recall": last_recall} if last_recall else {}, new[-1].seq)
        await store_episodes(
            ctx, episodes, cursor=(thread, self.layer, moved), retention=self.retention, now=now
        )

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
            "neighbours": self.spec.neighbours,
            "recall_tokens": self.spec.recall_tokens,
            "max_episodes": self.spec.max_episodes,
            "max_age_days": self.spec.max_age_days,
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
