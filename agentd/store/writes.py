"""Writes, as data: every change agentd makes to what it stores.

`await store.write(op1, op2, ...)` applies the ops in order in one
transaction and returns their results in a list: all of them or none. A turn
writes its messages, run, audit rows and delivery id as one such batch; a
memory run writes what it produced, its cursor, its run row and its audit rows
as another. An op may refuse (raise): then the whole batch is rolled back and
the error reaches the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from agentd.store.declarations import TextScreen, daemon_fields, memory_text
from agentd.store.records import (
    ApprovalRecord,
    AuditRecord,
    Fact,
    LayerState,
    MediaItem,
    NewEpisode,
    Pruned,
    RunRecord,
    StoredMessage,
)

T = TypeVar("T")


class Write(Generic[T]):
    """A change whose result (inside the batch's result list) is a T."""

    __slots__ = ()


class RowMissing(LookupError):
    """A write that needs an existing row found none; its batch was rolled back."""


@dataclass(frozen=True, slots=True)
class EnsureIdentity(Write[dict[str, str]]):
    """Set each key once (first write wins); the result is the whole identity."""

    values: Mapping[str, str]


# -- a turn --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """The platform delivery a run answered, remembered so a redelivery is answered once."""

    channel: str
    event_id: str
    conversation_key: str


@dataclass(frozen=True, slots=True)
class CommitTurn(Write[int | None]):
    """A message turn: its messages (creating the thread when `thread_id` is None), the last model
    call's input tokens, its run row and its delivery id. The result is the thread id (None when no
    message is kept); the run row records it."""

    conversation_key: str
    thread_id: int | None
    messages: Sequence[StoredMessage]
    run: RunRecord
    usage: tuple[int | None, bool] | None  # (last input tokens, estimated); None: no model call
    delivery: Delivery | None
    now: float


@dataclass(frozen=True, slots=True)
class InsertRun(Write[None]):
    run: RunRecord


@dataclass(frozen=True, slots=True)
class AppendAudit(Write[None]):
    agent: str
    records: Sequence[AuditRecord]
    ts: float
    daemon: str | None = None  # stamped by the store that writes it


def stamped(ops: Sequence[Write[Any]], daemon: str | None) -> list[Write[Any]]:
    """The ops with the writing daemon recorded on every run row and audit event (also the audit
    rows that retention and erasure write): on each op with a `daemon` field, and on each record it
    carries that has one (a run row, recorded on the record itself)."""
    if daemon is None:
        return list(ops)
    out: list[Write[Any]] = []
    for op in ops:
        own, carried = daemon_fields(type(op))
        for name in carried:
            getattr(op, name).daemon = daemon
        out.append(replace(op, daemon=daemon) if own else op)  # type: ignore[type-var]
    return out


@dataclass(frozen=True, slots=True)
class RecordDelivery(Write[None]):
    delivery: Delivery
    run_id: str | None
    now: float


@dataclass(frozen=True, slots=True)
class PruneDeliveries(Write[int]):
    """Forget delivery ids received before `older_than`; the result is how many."""

    older_than: float


# -- media ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreMedia(Write[None]):
    """Keep the files of a message (agentd.engine.media), before its turn runs: a turn that fails
    still has them for a retry."""

    items: Sequence[MediaItem]


@dataclass(frozen=True, slots=True)
class PruneMedia(Write[int]):
    """Delete the files sent before `older_than` (media.keep_days); the result is how many."""

    older_than: float


# -- approvals -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InsertApproval(Write[None]):
    """A paused run's approval request, with the run's state so far."""

    approval: ApprovalRecord


@dataclass(frozen=True, slots=True)
class DecideApproval(Write[None]):
    """Record a decision (approved | refused | expired) on a pending approval; RowMissing when it is no
    longer pending (someone else decided first, or it expired): then nothing of the batch is kept."""

    id: str
    status: str
    by: str | None
    at: float


@dataclass(frozen=True, slots=True)
class CloseApproval(Write[None]):
    """The approval's run has been resumed and committed: its saved state is dropped."""

    id: str


# -- threads -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveThread(Write[None]):
    thread_id: int
    now: float


@dataclass(frozen=True, slots=True)
class DeleteTranscript(Write[int]):
    """Delete a thread's messages, summaries and layer states (the thread row stays, empty)."""

    thread_id: int


@dataclass(frozen=True, slots=True)
class DeleteConversation(Write[dict[str, int]]):
    """Delete every thread of a conversation (archived ones too) with their messages, summaries,
    layer states and files (media), with one audit row of `agent` saying how many and who asked (`conversation/delete`;
    none when there was nothing to delete); the result is `{"threads": n, "messages": n}`. Runs and
    audit rows stay: they are the trail."""

    agent: str
    conversation_key: str
    by: str
    ts: float
    daemon: str | None = None  # stamped on its audit row by the store that writes it


@dataclass(frozen=True, slots=True)
class ApplyCompaction(Write[int]):
    """Write the summary and mark every message up to `upto_seq` compacted (rows are kept)."""

    thread_id: int
    upto_seq: int
    summary: str = field(metadata=memory_text("compaction"))
    run_id: str
    now: float


@dataclass(frozen=True, slots=True)
class PutLayerState(Write[int | None]):
    """A memory layer's state and cursor for one thread. The result is the thread's layers version
    after the write on a shared store (see agentd.store.claims.ThreadMark), None on a single-owner one."""

    thread_id: int
    layer: str
    state: LayerState
    now: float

    def screened(self, screen: TextScreen) -> PutLayerState:
        """The write with every string of the layer's state screened (a summary, Σ, a recall ...)."""
        data = screen.value(self.state.data, f"layer:{self.layer}")
        return replace(self, state=self.state if data == self.state.data else replace(self.state, data=data))


# -- persistent memory and facts ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UpsertMemory(Write[bool]):
    """Insert or replace a persistent memory; the result is True when the key is new."""

    scope: str
    key: str
    value: str = field(metadata=memory_text("memory"))
    run_id: str | None
    now: float


@dataclass(frozen=True, slots=True)
class DeleteMemory(Write[bool]):
    """Delete a persistent memory; with `must_exist`, a missing key raises RowMissing."""

    scope: str
    key: str
    must_exist: bool = False


@dataclass(frozen=True, slots=True)
class UpsertFact(Write[str]):
    """Insert or update one fact; the result is "created", "updated" or "kept" (a newer row stays)."""

    partition: str
    key: str
    value: str = field(metadata=memory_text("fact"))
    confidence: float
    source: str | None = field(metadata=memory_text("fact"))
    run_id: str | None
    now: float

    def fact(self) -> Fact:
        """The row it writes when the key is new (on a conflict the row keeps its created_at)."""
        return Fact(
            self.partition,
            self.key,
            self.value,
            self.confidence,
            self.source,
            self.now,
            self.now,
            self.run_id,
        )


@dataclass(frozen=True, slots=True)
class DeleteFact(Write[bool]):
    partition: str
    key: str


# -- episodes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InsertEpisodes(Write[list[int]]):
    """Insert in order; the result is the new ids (keyword indexes follow)."""

    episodes: Sequence[NewEpisode]

    def screened(self, screen: TextScreen) -> InsertEpisodes:
        """The write with each episode's text screened."""
        return replace(
            self, episodes=[replace(e, text=screen.text(e.text, "episode")) for e in self.episodes]
        )


@dataclass(frozen=True, slots=True)
class SetVectors(Write[None]):
    """Record the vectors of episodes embedded late; an episode already embedded keeps its vector."""

    embedder: str
    vectors: Sequence[tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class PruneEpisodes(Write[Pruned]):
    """Delete a partition's episodes created before `older_than`, then, past `max_episodes`, the
    least important first and among equals the oldest (keyword indexes follow). When anything
    goes, one audit row of `agent` says how many and why (`memory/prune_episodes`), never what."""

    agent: str
    partition: str
    max_episodes: int | None
    older_than: float | None
    ts: float
    daemon: str | None = None  # stamped on its audit row by the store that writes it


@dataclass(frozen=True, slots=True)
class DeletePartitionEpisodes(Write[int]):
    """Delete every episode of one partition (one person's, on request), with one audit row of
    `agent` saying how many and who asked (`memory/delete_episodes`); the result is how many."""

    agent: str
    partition: str
    by: str
    ts: float
    daemon: str | None = None  # stamped on its audit row by the store that writes it


# -- a person's data -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErasePerson(Write[dict[str, int]]):
    """Erase one person (agentd/store/people.py): their own conversations whole (threads, messages,
    summaries, memory state, runs, delivery ids, approvals), their exchanges in shared conversations
    as tombstones, their persistent memories, facts and episodes (keyword index and vectors with them),
    and every audit field naming them (the chain still verifies). In a shared thread they spoke in,
    what was derived from everyone's messages is rebuilt without them: compaction summaries go (the
    messages they covered are shown again, and compacted anew), layer states holding any of
    `rebuild_layers_holding` go (the layer starts over from the thread), and `drop_layer_keys` are
    removed from the others. One audit event of `agent` records the counts per kind and `subject` (a
    salted hash of the id, never the id), plus `record` when given (then it is written even when
    nothing was erased). The result is the counts.

    `conversations`: erase only in these (the ones the caller holds, so no hot copy of them outlives
    the erasure); None: in every conversation."""

    agent: str
    user_id: str
    subject: Mapping[str, Any]
    by: str
    ts: float
    conversations: Sequence[str] | None = None
    rebuild_layers_holding: Sequence[str] = ()
    drop_layer_keys: Sequence[str] = ()
    record: Mapping[str, Any] | None = None
    daemon: str | None = None  # stamped on its audit row by the store that writes it
