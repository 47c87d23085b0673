"""The memory seam: what the model sees next, the tools a memory offers, and the work after a run.

A strategy is built once per agent definition and is stateless across
conversations: per-conversation state lives in the hot thread (`thread.layers`,
a cache) and in the agent's SQLite file (`memory_state`, episodes, facts).
Everything it does after a run is derived from persisted cursors, so a crash
or a restart never loses pending memory work: it is simply done next time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentd.memory.tooling import Tool
from agentd.messages import Message
from agentd.providers.base import Completion, Embedder
from agentd.store.db import AgentStore
from agentd.store.runs import RunRecord
from agentd.store.transcripts import StoredThread


@dataclass(frozen=True, slots=True)
class TurnInput:
    """The message about to be answered: what recall searches with, and who is speaking."""

    conversation_key: str
    text: str
    user_id: str | None


def speaker_partition(conversation_key: str, user_id: str | None) -> str:
    """Whose memories these are: the person when known, else only this conversation.

    Never a shared bucket: an anonymous caller can only reach what was said in
    its own conversation.
    """
    return f"user:{user_id}" if user_id else f"conversation:{conversation_key}"


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What a strategy gives the prompt: sections for the system prompt, and history to replay."""

    system_sections: Sequence[str] = ()
    messages: Sequence[Message] = ()
    # characters of sections + messages when the strategy knows them cheaply (None: count them)
    chars: int | None = None
    # said once in the run log (e.g. "no embedder configured: nothing recalled")
    notes: Sequence[str] = field(default=())


@dataclass(slots=True)
class ModelCall:
    """A successful model call and its run row, which the caller commits with what it changed."""

    completion: Completion
    run: RunRecord


class MemoryContext(Protocol):
    """What the engine gives a strategy: the agent's file, models, the embedder, the audit trail."""

    @property
    def agent(self) -> str: ...

    @property
    def store(self) -> AgentStore: ...

    @property
    def embedder(self) -> Embedder | None: ...

    def agent_model(self, small: bool = False) -> str:
        """The agent's model reference; with small, model.small when set (compaction, summaries)."""
        ...

    def memory_model(self, preferred: str | None) -> str | None:
        """The model for folds/extraction/summaries: `preferred`, else agentd.yaml's
        memory_extractor_model, else the agent's own (non-offline) model; None when there is none."""
        ...

    async def call_model(
        self,
        *,
        trigger: str,
        model_ref: str,
        system: str,
        messages: Sequence[Message],
        conversation_key: str | None,
        thread_id: int | None = None,
        parent_run_id: str | None = None,
        purpose: str = "chat",
    ) -> ModelCall:
        """One model call that is its own run (`trigger`: compaction, summary, fold, extraction).

        On success the run row is returned, not written: commit it in the same
        transaction as what the call produced. On failure the failed run is
        recorded here and ProviderError (or OperatorError) is raised.
        """
        ...

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        run_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None: ...


class MemoryStrategy(Protocol):
    """How one agent's conversations are remembered."""

    @property
    def kind(self) -> str: ...

    @property
    def keeps_transcript(self) -> bool:
        """Whether a turn's messages are stored in the conversation's thread at all."""
        ...

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        """What the model sees for this turn (besides the purpose and the new message)."""
        ...

    def tools(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> Sequence[Tool]:
        """Tools this memory offers the model this turn (e.g. save_episode)."""
        ...

    def settle_due(self, thread: StoredThread) -> bool:
        """Cheap check, after every run and before every turn: is after-run work waiting?"""
        ...

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        """Do the after-run work (compact, fold, extract, summarise, store episodes).

        Called with the conversation's lock held, after the reply went out and
        before the next message of the conversation loads its history.
        """
        ...

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        """For the inspector: what this memory will give the model next, with its own details."""
        ...


class StrategyDefaults:
    """What most strategies do for the optional parts of the seam: no tools, no after-run work."""

    def tools(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> Sequence[Tool]:
        return ()

    def settle_due(self, thread: StoredThread) -> bool:
        return False

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        return None
