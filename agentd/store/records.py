"""The rows agentd stores, as plain data every backend reads and writes the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentd.messages import Message, load_messages


@dataclass(slots=True)
class RunRecord:
    """One unit of model work: a message turn, a compaction, a command, a fold, an extraction..."""

    id: str
    conversation_key: str | None
    trigger: str  # message | compaction | command | fold | extraction | summary
    model: str | None
    status: str  # ok | error
    started_at: float
    thread_id: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_estimated: bool = False
    last_input_tokens: int | None = None
    model_calls: int = 0
    duration_ms: float | None = None
    error: str | None = None
    parent_run_id: str | None = None
    daemon: str | None = None  # which daemon ran it (stamped by the store that writes it)


RUN_COLUMNS: tuple[str, ...] = tuple(RunRecord.__dataclass_fields__)


@dataclass(slots=True)
class AuditRecord:
    """One audit event: memory writes, commands, compactions, permission and config decisions."""

    kind: str
    action: str
    conversation_key: str | None = None
    run_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ApprovalRecord:
    """A tool call waiting for a person's yes or no, and the paused run it belongs to.

    `state` is the run so far (see agentd.engine.paused), kept until the run has
    been resumed and committed; `status` is pending until someone decides or it
    expires (approved | refused | expired).
    """

    id: str  # short: what a person types after /approve
    conversation_key: str
    run_id: str
    tool: str  # the name the model called
    server: str | None
    args: dict[str, Any]  # as called: the approved call runs with these
    shown_args: dict[str, Any]  # redacted: what the approval request and the audit show
    requested_by: str  # <channel>:<user id> of the person whose message started the run
    approvers: list[str]
    created_at: float
    expires_at: float
    status: str = "pending"
    decided_by: str | None = None
    decided_at: float | None = None
    state: dict[str, Any] | None = None


@dataclass(slots=True)
class StoredMessage:
    seq: int
    message: Message
    run_id: str | None = None


def stored_messages(rows: Sequence[tuple[int, str, str | None]]) -> list[StoredMessage]:
    """(seq, stored body, run id) rows, as both backends read a page of a transcript."""
    messages = load_messages([body for _, body, _ in rows])
    return [
        StoredMessage(seq, message, run_id) for (seq, _, run_id), message in zip(rows, messages, strict=True)
    ]


def thread_history(rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """(thread id, conversation key, status, seq, role, user id, run id, compacted) rows of threads
    left-joined to their messages in thread then seq order, as both backends read ThreadHistory: one
    dict per thread with its messages (none for a thread without any: seq is NULL)."""
    threads: dict[int, dict[str, Any]] = {}
    for thread_id, key, status, seq, role, user_id, run_id, compacted in rows:
        thread = threads.setdefault(
            thread_id, {"id": thread_id, "conversation_key": key, "status": status, "messages": []}
        )
        if seq is not None:
            thread["messages"].append(
                {"seq": seq, "role": role, "user_id": user_id, "run_id": run_id, "compacted": bool(compacted)}
            )
    return list(threads.values())


@dataclass(slots=True)
class LayerState:
    """What one memory layer carries for one thread between turns, and how far it has read."""

    data: dict[str, Any] = field(default_factory=dict)
    upto_seq: int = 0  # the last message seq this layer has taken in (folded, summarised, extracted)
    updated_at: float | None = None
    # never stored: what the layer keeps only while the thread is hot (e.g. a failed refresh's seq)
    transient: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StoredThread:
    """The active thread of a conversation as the model will see it: summary + uncompacted messages."""

    conversation_key: str
    id: int | None = None
    summary: str | None = None
    messages: list[StoredMessage] = field(default_factory=list)
    next_seq: int = 1
    last_input_tokens: int | None = None
    last_tokens_estimated: bool = False
    # characters the model reads for summary + messages: the base of token estimates, kept
    # incrementally so an estimate never walks a long thread.
    chars: int = 0
    # per memory layer: its state for this thread (loaded from memory_state once while hot)
    layers: dict[str, LayerState] = field(default_factory=dict)
    # where the store stood when this copy was read (see agentd.store.claims.ThreadMark); a shared
    # store moves them, a single-owner store leaves them at 0
    version: int = 0
    layers_version: int = 0

    def recount(self) -> None:
        self.chars = len(self.summary or "") + sum(m.message.char_count() for m in self.messages)

    def append(self, messages: Sequence[StoredMessage]) -> None:
        """Add the committed messages this copy does not hold yet (seq from next_seq on), in order.
        On a shared store the turn that committed them and a catch-up that read them (the memory
        work's claim, beside the turn) may both bring the same ones: they are added once."""
        fresh = [m for m in messages if m.seq >= self.next_seq]
        if fresh:
            self.messages.extend(fresh)
            self.next_seq = fresh[-1].seq + 1
            self.chars += sum(m.message.char_count() for m in fresh)


@dataclass(frozen=True, slots=True)
class NewEpisode:
    partition: str
    conversation_key: str | None
    text: str
    created_at: float
    importance: float = 1.0
    run_id: str | None = None
    embedder: str | None = None
    vector: bytes | None = None  # float32 .tobytes(); None (with embedder None) = not embedded yet


@dataclass(frozen=True, slots=True)
class Episode:
    id: int
    partition: str
    conversation_key: str | None
    text: str
    importance: float
    created_at: float
    run_id: str | None
    embedder: str | None


def ends_by_asking(text: str) -> bool:
    """Whether an episode asks (its text ends with a question mark); the SQL backends agree."""
    return text.rstrip(" \t\n\r").endswith("?")


@dataclass(frozen=True, slots=True)
class KeywordHit:
    id: int
    bm25: float  # bm25: negative, lower is a better match
    created_at: float
    importance: float
    embedded: bool
    text: str
    partition: str
    conversation_key: str | None
    run_id: str | None
    embedder: str | None

    def episode(self) -> Episode:
        """The episode itself (a hit carries all of it: recall needs no second read for its text)."""
        return Episode(
            self.id,
            self.partition,
            self.conversation_key,
            self.text,
            self.importance,
            self.created_at,
            self.run_id,
            self.embedder,
        )


@dataclass(frozen=True, slots=True)
class StoredVector:
    id: int
    created_at: float
    importance: float
    vector: bytes
    asks: bool  # ends_by_asking(text)


@dataclass(frozen=True, slots=True)
class VectorDelta:
    """What a partition's vectors of one embedder gained and lost after a change number (a shared
    store's per-partition change counter), and the change it stands at now. `complete` False: the
    store no longer records deletions that old, so only a reload of the whole partition is exact."""

    change: int
    added: list[StoredVector]
    removed: list[int]
    complete: bool = True


@dataclass(frozen=True, slots=True)
class Pruned:
    """What retention deleted from one partition: the ids (to drop from loaded indexes) and why."""

    ids: list[int]
    by_age: int
    by_count: int


@dataclass(frozen=True, slots=True)
class Fact:
    partition: str
    key: str
    value: str
    confidence: float
    source: str | None
    created_at: float
    updated_at: float
    run_id: str | None = None
