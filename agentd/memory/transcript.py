"""The two strategies `scope` chooses: no history, or the full transcript with compaction."""

from __future__ import annotations

from typing import Any

from agentd.config.models import MemorySpec
from agentd.config.strategies import FullStrategy, NoneStrategy
from agentd.memory.base import MemoryContext, MemoryView, TurnInput
from agentd.memory.compaction import KEEP_TURNS, CompactionOutcome, compact_thread, compacted_section
from agentd.messages import MESSAGE_ADAPTER, MessageSequence
from agentd.providers.base import PromptHints
from agentd.store.records import StoredThread


class NoHistory:
    """none — every run starts blank: the purpose and the new message."""

    kind = "none"
    keeps_transcript = False

    def __init__(
        self, spec: NoneStrategy | None = None, memory: MemorySpec | None = None, layer: str = "none"
    ):
        self.layer = layer

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        return MemoryView()

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        return {"kind": self.kind, "layer": self.layer, "sees": "nothing: every run starts blank"}


class FullTranscript:
    """full (and scope: thread) — the whole transcript, compacted once the context crosses the threshold."""

    kind = "full"
    keeps_transcript = True

    def __init__(
        self, spec: FullStrategy | None = None, memory: MemorySpec | None = None, layer: str = "full"
    ):
        threshold = (memory or MemorySpec()).compact_at_tokens
        self.compact_at_tokens: int | None = threshold if threshold is not False else None
        self.layer = layer

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        return self.current_view(thread)

    def current_view(self, thread: StoredThread) -> MemoryView:
        sections = (compacted_section(thread.summary),) if thread.summary else ()
        return MemoryView(
            system_sections=sections,
            messages=MessageSequence(thread.messages),
            chars=thread.chars,
            hints=PromptHints(summary=thread.summary is not None),
        )

    def settle_due(self, thread: StoredThread) -> bool:
        # The trigger reads the last model call of the last run only (reset by compaction),
        # so it neither never fires without usage nor fires on every message after crossing.
        return (
            self.compact_at_tokens is not None
            and thread.last_input_tokens is not None
            and thread.last_input_tokens >= self.compact_at_tokens
        )

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        if self.settle_due(thread):
            await compact_thread(ctx, thread, reason="threshold")

    async def compact(
        self,
        ctx: MemoryContext,
        thread: StoredThread,
        reason: str,
        *,
        keep_turns: int = KEEP_TURNS,
    ) -> CompactionOutcome:
        return await compact_thread(ctx, thread, reason, keep_turns=keep_turns)

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        view = self.current_view(thread)
        return {
            "kind": self.kind,
            "layer": self.layer,
            "summary": thread.summary,
            "messages": [
                MESSAGE_ADAPTER.dump_python(m, mode="json", exclude_none=True) for m in view.messages
            ],
            "context_tokens": thread.last_input_tokens,
            "tokens_estimated": thread.last_tokens_estimated,
            "compact_at_tokens": self.compact_at_tokens,
        }
