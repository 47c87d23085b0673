"""Reads, as data: what the engine and the memory strategies ask a store for.

A backend answers each `Query[T]` with a T (`await store.read(query)`), and
several at once in one hop (`await store.read_many(q1, q2)`). Nothing here
knows SQL: the SQLite and PostgreSQL backends each map a query to their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentd.store.claims import Claim
from agentd.store.records import (
    ApprovalRecord,
    Delivered,
    Episode,
    Fact,
    KeywordHit,
    LayerState,
    StoredMessage,
    StoredThread,
    StoredVector,
    VectorDelta,
)

T = TypeVar("T")


class Query(Generic[T]):
    """A read whose answer is a T."""

    __slots__ = ()


# -- threads and messages ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThreadHeader(Query[StoredThread]):
    """The active thread's row and latest summary, without its messages (load those by page)."""

    conversation_key: str


@dataclass(frozen=True, slots=True)
class ConversationMark(Query[Claim]):
    """Where the conversation's active thread and the agent's memories stand, as a claim reports them,
    without taking the conversation (no token): what a read outside a turn (the inspector, /status)
    checks a cached copy against on a shared store. Empty on a single-owner store: nothing else writes."""

    conversation_key: str


@dataclass(frozen=True, slots=True)
class MessagesPage(Query[list[StoredMessage]]):
    """Uncompacted messages with seq > after_seq, in order; at most `limit` (None: all)."""

    thread_id: int
    after_seq: int
    limit: int | None


@dataclass(frozen=True, slots=True)
class ActiveThread(Query[StoredThread]):
    """The active thread with every uncompacted message, in one go (tools, tests, small threads)."""

    conversation_key: str


@dataclass(frozen=True, slots=True)
class MessageCounts(Query[dict[str, int]]):
    """The active thread's messages (total, compacted) and the conversation's archived threads."""

    conversation_key: str


@dataclass(frozen=True, slots=True)
class ThreadHistory(Query[list[dict[str, Any]]]):
    """Every thread (of one conversation, or all), archived ones too, oldest first, each with every
    message it holds, compacted or not, in seq order (seq, role, user_id, run_id, compacted): what the
    store keeps of a conversation, as a check of it reads it, not what the model sees."""

    conversation_key: str | None = None


@dataclass(frozen=True, slots=True)
class Conversations(Query[list[dict[str, Any]]]):
    """Conversations with an active thread, the most recently active first (`offset` skips as many)."""

    limit: int = 200
    offset: int = 0


@dataclass(frozen=True, slots=True)
class LayerStateOf(Query[LayerState]):
    thread_id: int
    layer: str


# -- runs, audit, deliveries -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Runs(Query[list[dict[str, Any]]]):
    """The newest runs (of one conversation, or all), oldest first."""

    conversation_key: str | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class RunTotals(Query[dict[str, dict[str, int]]]):
    """Per trigger: runs, errors, input and output tokens (of one conversation, or all)."""

    conversation_key: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEvents(Query[list[dict[str, Any]]]):
    """The newest `limit` events matching the filters, oldest first (`tool`: events whose data names
    that tool, as the model called it)."""

    agent: str | None = None
    kind: str | None = None
    since: float | None = None
    limit: int = 100
    tool: str | None = None

    def conditions(self) -> list[tuple[str, str, Any]]:
        """The column filters asked for, as (column, operator, value); `tool` is each backend's own."""
        wanted = (("agent", "=", self.agent), ("kind", "=", self.kind), ("ts", ">=", self.since))
        return [(column, op, value) for column, op, value in wanted if value is not None]


@dataclass(frozen=True, slots=True)
class AuditTrail(Query[list[dict[str, Any]]]):
    """The store's audit chain in seq order with all that verifying it needs (values, nonces, erased
    commitments, hashes): the events after `after_seq`, at most `limit`; with `since`, only from the
    first event at or after that time on (a chain has no holes: later events all follow)."""

    after_seq: int = 0
    limit: int = 1000
    since: float | None = None


@dataclass(frozen=True, slots=True)
class AuditHead(Query[tuple[int, str] | None]):
    """The chain head the store records: the last event's seq and hash (hex); None before any event."""


# -- a person's data ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PersonConversations(Query[dict[str, list[str]]]):
    """The conversations a person spoke in, sorted: `theirs` (nobody else spoke there) and `shared`."""

    user_id: str


@dataclass(frozen=True, slots=True)
class PersonData(Query[dict[str, Any]]):
    """Everything the store holds about one person (agentd/store/people.py), JSON-ready, each item with
    its conversation: their conversations whole, their exchanges in shared ones, their persistent
    memories, facts and episodes, the runs of their turns, approvals they asked for, audit events
    naming them. Empty lists when it holds nothing of theirs."""

    user_id: str


# -- media -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MediaBlobs(Query[dict[str, bytes]]):
    """The bytes of these files of the conversation, by sha256 (a file no longer kept is left out)."""

    conversation_key: str
    sha256s: Sequence[str]


@dataclass(frozen=True, slots=True)
class MediaFile(Query["tuple[bytes, str, str | None] | None"]):
    """One file of the agent's by its hash, whichever conversation has it: (bytes, MIME type, file
    name), the latest stored; None when no conversation keeps it (never sent, erased, pruned)."""

    sha256: str


# -- approvals ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenApprovals(Query[list[ApprovalRecord]]):
    """Approvals whose run has not been resumed yet (pending, or decided just before a stop), oldest first."""


@dataclass(frozen=True, slots=True)
class ApprovalById(Query[ApprovalRecord | None]):
    id: str


@dataclass(frozen=True, slots=True)
class DeliveredReply(Query[Delivered | None]):
    """What an answered delivery (channel, event id) became: a retry with the same idempotency key
    is answered with it. None when it was never answered (or was pruned)."""

    channel: str
    event_id: str


@dataclass(frozen=True, slots=True)
class DeliverySeen(Query[bool]):
    """Whether this platform delivery (channel, event id) was answered already."""

    channel: str
    event_id: str


@dataclass(frozen=True, slots=True)
class ConversationModel(Query[str | None]):
    """The model `/model` chose for the conversation (None: the agent file's)."""

    conversation_key: str


# -- persistent memory and facts ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryKeys(Query[dict[str, list[str]]]):
    """Every scope's persistent-memory keys, sorted."""


@dataclass(frozen=True, slots=True)
class MemoryValue(Query[str | None]):
    scope: str
    key: str


@dataclass(frozen=True, slots=True)
class Memories(Query[list[dict[str, Any]]]):
    """Persistent memories with their values (of one scope, or all)."""

    scope: str | None = None


@dataclass(frozen=True, slots=True)
class Facts(Query[list[Fact]]):
    """A partition's semantic facts, the most recently updated first."""

    partition: str
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class FactPartitions(Query[list[str]]):
    """Every partition holding facts."""


# -- episodes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingEpisodes(Query[list[Episode]]):
    """A partition's episodes not embedded yet (the embedder was down or absent), oldest first."""

    partition: str
    limit: int = 64


@dataclass(frozen=True, slots=True)
class Vectors(Query[list[StoredVector]]):
    """Every vector one embedder produced for a partition, in id order (to build the index)."""

    partition: str
    embedder: str


@dataclass(frozen=True, slots=True)
class VectorChanges(Query[VectorDelta]):
    """How a partition's vectors of `embedder` changed after change number `since` (0: every vector),
    so an index another daemon's writes made stale catches up exactly, in id order. A single-owner
    store has nothing to report after 0: every change went through the one process, which applied
    it to its own indexes."""

    partition: str
    embedder: str
    since: int


@dataclass(frozen=True, slots=True)
class EpisodesById(Query[dict[int, Episode]]):
    ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class KeywordSearch(Query[list[KeywordHit]]):
    """The best keyword matches of any of `terms` within one partition, among episodes of `embedder`
    or not embedded yet (embedder None: every episode of the partition), best first."""

    partition: str
    embedder: str | None
    terms: Sequence[str]
    limit: int


@dataclass(frozen=True, slots=True)
class NeighbourEpisodes(Query[list[list[Episode]]]):
    """For each anchor: up to `each_side` episodes of its partition and conversation said just before
    it and just after it (among the few hundred written around it), of `embedder` or not embedded
    yet, in id order."""

    anchors: Sequence[Episode]
    each_side: int
    embedder: str | None


@dataclass(frozen=True, slots=True)
class FollowingEpisodes(Query[dict[int, Episode]]):
    """For each id: the next episode of its partition and conversation (its reply), of `embedder` or
    not embedded yet; ids without one are left out."""

    ids: Sequence[int]
    embedder: str | None


@dataclass(frozen=True, slots=True)
class Episodes(Query[list[Episode]]):
    """A partition's episodes, embedded or not, in id order (the order they were said)."""

    partition: str


@dataclass(frozen=True, slots=True)
class EpisodePartitions(Query[list[str]]):
    """Every partition holding episodes (for a retention sweep)."""


@dataclass(frozen=True, slots=True)
class EpisodeCounts(Query[dict[str, int]]):
    """A partition's episodes: total, embedded by `embedder`, by other embedders, not embedded yet."""

    partition: str
    embedder: str | None


@dataclass(frozen=True, slots=True)
class ConversationPartitions(Query[list[str]]):
    """The partitions episodes of one conversation went to (one per person who spoke there)."""

    conversation_key: str
