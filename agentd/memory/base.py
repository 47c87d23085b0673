"""The memory seam: what the model sees next, and the work a conversation needs after a run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentd.messages import Message
from agentd.store.transcripts import StoredThread


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What a strategy gives the prompt: sections for the system prompt, and history to replay."""

    system_sections: Sequence[str] = ()
    messages: Sequence[Message] = ()
    # characters of sections + messages when the strategy knows them cheaply (None: count them)
    chars: int | None = None
    notes: Sequence[str] = field(
        default=()
    )  # said once in the run log (e.g. "no embedder: nothing recalled")


class MemoryStrategy(Protocol):
    """How one agent's conversations are remembered.

    `keeps_transcript` says whether the turn's messages are stored in the
    conversation's thread at all; `view` is pure and cheap (it runs on every
    turn, against the in-memory hot thread).
    """

    @property
    def kind(self) -> str: ...

    @property
    def keeps_transcript(self) -> bool: ...

    def view(self, thread: StoredThread) -> MemoryView: ...

    def needs_compaction(self, thread: StoredThread) -> bool: ...
