"""The memory seam: what the model sees next (`view`), and small optional capabilities.

A strategy is built once per agent definition and is stateless across
conversations: per-conversation state lives in the hot thread (`thread.layers`,
a cache) and in the agent's store (layer state, episodes, facts). Everything
it does after a run is derived from persisted cursors, so a crash or a restart
never loses pending memory work: it is simply done next time.

Every strategy has `view`. The rest are separate protocols a strategy
implements only when it has them, and the engine checks them by type once per
definition (`Memory.of`):

    AfterRun      work after a run (compact, fold, extract, summarise, store episodes)
    OffersTools   tools for the model (save_episode)
    Compacts      the full transcript, which `/compact` and the threshold apply to
    Inspectable   what the inspector shows of this memory
    ReadsTail     only the end of the transcript: the hot thread keeps only that
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentd.messages import Message
from agentd.providers.base import Completion, Embedder, PromptHints
from agentd.store.base import Store
from agentd.store.records import RunRecord, StoredThread
from agentd.tools.base import Tool


@dataclass(frozen=True, slots=True)
class TurnInput:
    """The message about to be answered: what recall searches with, and who is speaking."""

    conversation_key: str
    text: str
    user_id: str | None
    sent_at: float | None = None  # when the person sent it, if the channel said
    linked: tuple[str, ...] = ()  # the user ids of the speaker's other accounts (one person, linked)


def speaker_partition(conversation_key: str, user_id: str | None) -> str:
    """Whose memories these are: the person when known, else only this conversation.

    Never a shared bucket: an anonymous caller can only reach what was said in
    its own conversation.
    """
    return f"user:{user_id}" if user_id else f"conversation:{conversation_key}"


def linked_partitions(linked: Sequence[str]) -> tuple[str, ...]:
    """The partitions of the speaker's other accounts: read with theirs (one person), never written to:
    what a speaker writes goes to their own account's partition, so an unlink leaves it there."""
    return tuple(f"user:{user_id}" for user_id in linked)


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What a strategy gives the prompt: sections for the system prompt, and history to replay."""

    system_sections: Sequence[str] = ()
    messages: Sequence[Message] = ()
    # characters of sections + messages when the strategy knows them cheaply (None: count them)
    chars: int | None = None
    # said once in the run log (e.g. "no embedder configured: nothing recalled")
    notes: Sequence[str] = field(default=())
    # what the sections hold, as data (a summary, recalled exchanges) for whoever reads the request
    hints: PromptHints = field(default_factory=PromptHints)


@dataclass(slots=True)
class ModelCall:
    """A successful model call and its run row, which the caller commits with what it changed."""

    completion: Completion
    run: RunRecord


class MemoryContext(Protocol):
    """What the engine gives a strategy: the agent's store, models, the embedder, the audit trail."""

    @property
    def agent(self) -> str: ...

    @property
    def store(self) -> Store: ...

    @property
    def embedder(self) -> Embedder | None: ...

    @property
    def secrets(self) -> str:
        """`memory.secrets` of the agent's current definition: redact, refuse or allow."""
        ...

    def agent_model(self, small: bool = False) -> str:
        """The agent's model reference; with small, model.small when set (compaction, summaries)."""
        ...

    def model_window(self, ref: str) -> int | None:
        """Tokens model `ref`'s context window holds: model.context_window for the agent's model,
        else what an overflow taught or the table of well-known models says (None: unknown)."""
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
        transaction as what the call produced (`memory.runs.commit_memory_run`).
        On failure the failed run is recorded here and ProviderError (or
        OperatorError) is raised.
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
    """How one agent's conversations are remembered: what the model sees for a turn."""

    @property
    def kind(self) -> str: ...

    @property
    def layer(self) -> str:
        """This strategy's name for its rows (its kind, or "<i>:<kind>" inside a composite)."""
        ...

    @property
    def keeps_transcript(self) -> bool:
        """Whether a turn's messages are stored in the conversation's thread at all."""
        ...

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        """What the model sees for this turn (besides the purpose and the new message)."""
        ...


@runtime_checkable
class AfterRun(Protocol):
    """Work after a run, done with the conversation's lock held, after the reply went out and
    before the next message of the conversation loads its history."""

    def settle_due(self, thread: StoredThread) -> bool:
        """Cheap check, after every run and before every turn: is after-run work waiting?"""
        ...

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None: ...


@runtime_checkable
class OffersTools(Protocol):
    def tools(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> Sequence[Tool]:
        """Tools this memory offers the model this turn (e.g. save_episode)."""
        ...


@runtime_checkable
class Compacts(Protocol):
    """A memory that replays the whole transcript and compacts it (`/compact`, the threshold)."""

    compact_at_tokens: int | None

    async def compact(
        self,
        ctx: MemoryContext,
        thread: StoredThread,
        reason: str,
        *,
        keep_turns: int = 2,
    ) -> Any:
        """Compact the thread now (the caller holds its lock), keeping its last `keep_turns` turns
        verbatim; returns a CompactionOutcome."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        """For the inspector: what this memory will give the model next, with its own details."""
        ...


@runtime_checkable
class ReadsTail(Protocol):
    """A memory that reads only the end of a thread (a window, what follows a cursor).

    Without it a memory is taken to read the whole transcript, and the hot thread
    keeps all of it in memory.
    """

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        """The seq of the oldest message this memory will read of `thread` (its view, its after-run
        work, its inspector); older ones need not be in memory. `thread.next_seq - 1` is the last
        message's seq. Worked out from what the thread holds: when that cannot tell (say, no person's
        message is held yet), answer a seq before the first one held, and the loader loads older
        messages and asks again."""
        ...


@runtime_checkable
class Retains(Protocol):
    """A memory whose stored items expire (episodes: max_episodes, max_age_days)."""

    async def sweep(self, ctx: MemoryContext, now: float) -> int:
        """Apply retention to everything stored (a periodic sweep); returns how many items went."""
        ...


@runtime_checkable
class ShowsPending(Protocol):
    """After-run work whose view shows verbatim what that work has not taken in yet (Σ and the
    messages not folded; the summary and the messages since), so it need not precede the next turn."""

    def pending_in_view(self, thread: StoredThread) -> int:
        """How many of the thread's messages the view shows because the work has not taken them in."""
        ...


@runtime_checkable
class Layered(Protocol):
    """A memory made of other memories (composite)."""

    layers: Sequence[Memory]


@dataclass(frozen=True, slots=True)
class Memory:
    """A strategy and the optional capabilities it has, found by type once per definition.

    `settles_first`: its after-run work must be done before the next turn loads
    history (compaction, by the product's contract; episodes and facts, which
    the next turn would otherwise not see at all). Work whose view shows what it
    has not taken in yet (`ShowsPending`: folds, summaries) runs beside the
    conversation instead, in order, never in front of a reply. A composite
    settles first when any of its layers does.
    """

    strategy: MemoryStrategy
    after_run: AfterRun | None
    tools: OffersTools | None
    compaction: Compacts | None
    inspector: Inspectable | None
    tail: ReadsTail | None = None
    settles_first: bool = False

    @classmethod
    def of(cls, strategy: MemoryStrategy) -> Memory:
        after_run = strategy if isinstance(strategy, AfterRun) else None
        if isinstance(strategy, Layered):
            first = any(layer.settles_first for layer in strategy.layers)
        else:
            first = after_run is not None and not isinstance(strategy, ShowsPending)
        return cls(
            strategy,
            after_run,
            strategy if isinstance(strategy, OffersTools) else None,
            strategy if isinstance(strategy, Compacts) else None,
            strategy if isinstance(strategy, Inspectable) else None,
            strategy if isinstance(strategy, ReadsTail) else None,
            settles_first=first,
        )

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        """The oldest seq of `thread` this memory reads: 1 (everything) unless it reads only a tail."""
        if not self.keeps_transcript:
            return thread.next_seq
        if self.tail is None:
            return 1
        return await self.tail.tail_from(ctx, thread)

    @property
    def kind(self) -> str:
        return self.strategy.kind

    @property
    def keeps_transcript(self) -> bool:
        return self.strategy.keeps_transcript

    def settle_due(self, thread: StoredThread) -> bool:
        return self.after_run is not None and self.after_run.settle_due(thread)

    async def sweep(self, ctx: MemoryContext, now: float) -> int:
        """Retention over everything this memory stores (every layer of a composite)."""
        if isinstance(self.strategy, Layered):
            return sum([await layer.sweep(ctx, now) for layer in self.strategy.layers])
        return await self.strategy.sweep(ctx, now) if isinstance(self.strategy, Retains) else 0

    async def describe(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        """What the inspector shows of this memory: its own description, or its kind and layer."""
        if self.inspector is not None:
            return await self.inspector.inspect(ctx, thread)
        return {"kind": self.kind, "layer": self.strategy.layer}
