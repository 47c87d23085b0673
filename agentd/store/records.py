"""The rows agentd stores, as plain data every backend reads and writes the same way.

A record stored as one row has a `RowShape` (below each record): its columns are the record's fields,
in order, so a new field is a new column everywhere it is read or written (both backends, and `agentd
store copy`) once the two migrations add it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

from agentd.messages import Message, load_messages

R = TypeVar("R")


class RowShape(Generic[R]):
    """How a record is one row: its columns (the record's fields, in order), which of them are stored
    as compact JSON text, and which are booleans (0/1 on SQLite, read back as bool). Both backends
    build their SQL from it and read their rows with it, so they cannot disagree on an order."""

    __slots__ = ("_flag_at", "_index", "_json_at", "columns", "flags", "json", "names", "record")

    def __init__(self, record: type[R], *, json: tuple[str, ...] = (), flags: tuple[str, ...] = ()):
        self.record = record
        self.names: tuple[str, ...] = tuple(f.name for f in fields(record))  # type: ignore[arg-type]
        unknown = (set(json) | set(flags)) - set(self.names)
        if unknown:
            raise ValueError(f"{record.__name__} has no fields {sorted(unknown)}")
        self.json, self.flags = json, flags
        self.columns = ", ".join(self.names)  # "id, conversation_key, ..." for SELECT and INSERT
        self._index = {name: i for i, name in enumerate(self.names)}
        self._json_at = tuple(self._index[name] for name in json)
        self._flag_at = tuple(self._index[name] for name in flags)

    def marks(self, mark: str) -> str:
        """One placeholder per column: "?, ?, ..." (SQLite) or "%s, %s, ..." (PostgreSQL)."""
        return ", ".join([mark] * len(self.names))

    def qualified(self, alias: str) -> str:
        """The columns of a table aliased `alias` in a join: "n.id, n.partition, ..."."""
        return ", ".join(f"{alias}.{name}" for name in self.names)

    def values(self, record: R, **given: Any) -> tuple[Any, ...]:
        """The record as the row's values, in column order (JSON fields dumped; `given` overrides
        fields, e.g. a thread id made earlier in the same batch)."""
        row = [getattr(record, name) for name in self.names]
        for name, value in given.items():
            row[self._index[name]] = value
        for i in self._json_at:
            if row[i] is not None:
                row[i] = dump_json(row[i])
        return tuple(row)

    def record_of(self, row: Sequence[Any]) -> R:
        """The record a row of `columns` holds (JSON fields loaded, flags as bool)."""
        if not self._json_at and not self._flag_at:
            return self.record(*row)
        values = list(row)
        for i in self._json_at:
            if values[i] is not None:
                values[i] = json.loads(values[i])
        for i in self._flag_at:
            values[i] = bool(values[i])
        return self.record(*values)


def dump_json(value: Any) -> str:
    """A JSON field as a row holds it: compact, non-ASCII kept as it is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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


RUN_ROW = RowShape(RunRecord, flags=("tokens_estimated",))


# Every kind of audit event agentd writes: `GET /audit?kind=` and the audit page refuse any other.
AUDIT_KINDS = (
    "auth",
    "channel",
    "command",
    "compaction",
    "config",
    "conversation",
    "extraction",
    "fold",
    "media",
    "memory",
    "permission",
    "person",
    "summary",
    "tool",
)


@dataclass(frozen=True, slots=True)
class MediaItem:
    """A file a person sent, stored content-addressed per conversation and sender: the same bytes sent
    again there are one row (its `created_at` moves to the latest sending). `sender` is '' when the
    channel named nobody."""

    conversation_key: str
    sender: str
    sha256: str
    kind: str
    mime_type: str
    filename: str | None
    size: int
    data: bytes
    created_at: float


@dataclass(frozen=True, slots=True)
class Delivered:
    """What became of a delivery already answered: its conversation, its run and that run's outcome,
    and the reply it stored (None: a command, or an agent that keeps no transcript)."""

    conversation_key: str | None
    run_id: str | None
    status: str | None
    error: str | None
    reply: str | None

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> Delivered:
        """(conversation key, run id, status, error, stored reply body) as both backends read it."""
        key, run_id, status, error, body = row
        return cls(key, run_id, status, error, None if body is None else load_messages([body])[0].text)


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


APPROVAL_ROW = RowShape(ApprovalRecord, json=("args", "shown_args", "approvers", "state"))


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


NEW_EPISODE_ROW = RowShape(NewEpisode)  # (an episode as written: its id is the store's)


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


EPISODE_ROW = RowShape(Episode)  # (an episode as read: the stored row less its vector)


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


FACT_ROW = RowShape(Fact)
