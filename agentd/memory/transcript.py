"""The two strategies `scope` chooses: no history, or the full transcript with compaction."""

from __future__ import annotations

from dataclasses import dataclass

from agentd.memory.base import MemoryView
from agentd.store.transcripts import StoredThread

SUMMARY_HEADING = "Summary of the earlier part of this conversation (older turns were compacted):"


@dataclass(frozen=True)
class NoHistory:
    """scope: none — every run starts blank: the purpose and the new message."""

    kind: str = "none"
    keeps_transcript: bool = False

    def view(self, thread: StoredThread) -> MemoryView:
        return MemoryView()

    def needs_compaction(self, thread: StoredThread) -> bool:
        return False


@dataclass(frozen=True)
class FullTranscript:
    """scope: thread — the whole transcript replayed; compacted once the context crosses the threshold."""

    compact_at_tokens: int | None
    kind: str = "full"
    keeps_transcript: bool = True

    def view(self, thread: StoredThread) -> MemoryView:
        sections = (f"{SUMMARY_HEADING}\n{thread.summary}",) if thread.summary else ()
        return MemoryView(
            system_sections=sections, messages=[m.message for m in thread.messages], chars=thread.chars
        )

    def needs_compaction(self, thread: StoredThread) -> bool:
        # The trigger reads the last model call of the last run only (reset by compaction),
        # so it neither never fires without usage nor fires on every message after crossing.
        return (
            self.compact_at_tokens is not None
            and thread.last_input_tokens is not None
            and thread.last_input_tokens >= self.compact_at_tokens
        )
