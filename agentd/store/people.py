"""A person's data, as every backend finds and erases it: who a conversation belongs to, what a
tombstone keeps of a message, which audit fields name someone, how the erased id is recorded.

A person is a user id as the channels give it. Their conversations are those they spoke in: one
where nobody else spoke (a direct message, their own webhook conversation) is *theirs* and goes
whole on erasure, as does one whose key names them (`key_names`) though no message of it was kept; one shared with others (a group channel) keeps its history for the others, with
the person's exchanges — their messages and what the agent answered them, tool steps included —
replaced by tombstones that keep each message's place and shape (a tool call keeps its result).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from agentd.messages import (
    MediaPart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    dump_message,
    load_message,
)
from agentd.store.audit_chain import DATA_PREFIX, KEY_FIELD, Erased, erase_fields
from agentd.store.records import AuditRecord
from agentd.store.writes import ErasePerson

TOMBSTONE = "[erased at the sender's request]"
# audit data keys that hold a person: `user`, `user_id` (a user id), `by`, `requested_by`, `approvers`
# (<channel>:<user id>), `scope` and `partition` (user:<user id>)
PERSON_FIELDS = frozenset({"user", "user_id", "by", "requested_by", "approvers", "scope", "partition"})
# the salted hash an erasure records instead of the id (scrypt: slow on purpose, so ids that can be
# enumerated are not cheap to try against it)
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
EVENT_KIND, EVENT_ACTION = "person", "erase"


def partition_of(user_id: str) -> str:
    """The person's partition of episodes and facts, and their scope of persistent memory."""
    return f"user:{user_id}"


def tombstone(message: Message) -> Message:
    """The message with nothing said left: every text, tool argument and result replaced, who sent
    it and when removed; its role and parts stay, so the thread still reads as a conversation."""
    parts: list[TextPart | ToolCallPart | ToolResultPart] = []
    for part in message.parts:
        if isinstance(part, TextPart | MediaPart):  # a file's reference (its hash) goes with its text
            parts.append(TextPart(text=TOMBSTONE))
        elif isinstance(part, ToolCallPart):
            parts.append(part.model_copy(update={"arguments": {}}))
        else:
            parts.append(part.model_copy(update={"content": TOMBSTONE}))
    return Message(role=message.role, parts=tuple(parts))


def tombstone_body(body: str) -> str:
    """A stored message (JSON) as its tombstone."""
    return dump_message(tombstone(load_message(body)))


def names(value: Any, user_id: str) -> bool:
    """Whether a value names the person: their id, `<channel>:<id>`, `user:<id>`, or a list holding one."""
    if isinstance(value, str):
        return value == user_id or value.endswith(":" + user_id)
    if isinstance(value, list):
        return any(names(v, user_id) for v in value)
    return False


def key_names(conversation_key: str | None, user_id: str) -> bool:
    """Whether a conversation key is the person's by its form: a direct message (`discord:dm:<id>`) or a
    conversation kept per person (`…:user:<id>`). Such a conversation is theirs even when no message of
    it was kept (an agent with `scope: none` keeps runs, not transcripts)."""
    return bool(conversation_key) and conversation_key.endswith((f":dm:{user_id}", f":user:{user_id}"))  # type: ignore[union-attr]


def audit_fields(event: Mapping[str, Any], user_id: str, theirs: Collection[str]) -> list[str]:
    """The fields of a stored audit event to erase for the person (none: the event does not concern
    them). An event of one of their own conversations (`theirs`) keeps only what happened and when:
    its conversation key and all its data go. Any other event loses the fields that name them."""
    key, data = event[KEY_FIELD], event["data"]
    if key is not None and key in theirs:
        return [KEY_FIELD, *(DATA_PREFIX + name for name in data)]
    fields = [DATA_PREFIX + name for name in data if name in PERSON_FIELDS and names(data[name], user_id)]
    if fields and key_names(key, user_id):
        fields.insert(0, KEY_FIELD)
    return fields


def subject_of(user_id: str) -> dict[str, Any]:
    """What an erasure records of whom it erased: a salted scrypt hash, never the id. Whoever holds an
    id can check it against the record (hashlib.scrypt(id, salt=…, n=…, r=…, p=…, dklen=…))."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(user_id.encode("utf-8"), salt=salt, maxmem=64 * 2**20, **SCRYPT)
    return {"scrypt": digest.hex(), "salt": salt.hex(), **{k: v for k, v in SCRYPT.items() if k != "dklen"}}


def is_subject(user_id: str, subject: Mapping[str, Any]) -> bool:
    digest = hashlib.scrypt(
        user_id.encode("utf-8"),
        salt=bytes.fromhex(subject["salt"]),
        n=subject["n"],
        r=subject["r"],
        p=subject["p"],
        dklen=SCRYPT["dklen"],
        maxmem=64 * 2**20,
    )
    return digest.hex() == subject["scrypt"]


def counts_of(found: Mapping[str, int]) -> dict[str, int]:
    """The counts worth recording: the kinds of which something was erased."""
    return {kind: n for kind, n in found.items() if n}


# -- shaping what a backend read into the export, the same on every backend --------------------------


def message_item(seq: int, body: str, run_id: str | None, created_at: float) -> dict[str, Any]:
    shown = load_message(body).model_dump(mode="json", exclude_none=True)
    return {"seq": seq, "created_at": created_at, "run_id": run_id, **shown}


def thread_item(
    thread_id: int,
    status: str,
    created_at: float,
    ended_at: float | None,
    messages: list[dict[str, Any]],
    summaries: Iterable[tuple[int, str, float]],
    layers: Iterable[tuple[str, str, int]],
) -> dict[str, Any]:
    """One thread of a conversation of theirs: messages, compaction summaries, memory layer states."""
    return {
        "thread_id": thread_id,
        "status": status,
        "created_at": created_at,
        "ended_at": ended_at,
        "messages": messages,
        "summaries": [{"upto_seq": u, "text": t, "created_at": c} for u, t, c in summaries],
        "memory_state": {layer: {"data": json.loads(data), "upto_seq": upto} for layer, data, upto in layers},
    }


def shared_conversations(rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Their exchanges in shared conversations, from rows (thread_id, conversation_key, status, seq,
    body, run_id, created_at) in conversation, thread and seq order."""
    by_key: dict[str, dict[int, dict[str, Any]]] = {}
    for thread_id, key, status, seq, body, run_id, created_at in rows:
        thread = by_key.setdefault(key, {}).setdefault(
            thread_id, {"thread_id": thread_id, "status": status, "messages": []}
        )
        thread["messages"].append(message_item(seq, body, run_id, created_at))
    return [
        {"conversation_key": key, "shared": True, "threads": list(threads.values())}
        for key, threads in by_key.items()
    ]


def their_approvals(
    rows: Iterable[tuple[str, str, str, str, str, str, float]], user_id: str, theirs: Collection[str]
) -> list[dict[str, Any]]:
    """Approvals of their conversations or asked for by them, from rows (id, conversation_key, tool,
    args JSON, requested_by, status, created_at)."""
    return [
        {
            "id": id_,
            "conversation_key": key,
            "tool": tool,
            "args": json.loads(args),
            "requested_by": requested_by,
            "status": status,
            "created_at": created_at,
        }
        for id_, key, tool, args, requested_by, status, created_at in rows
        if key in theirs or names(requested_by, user_id)
    ]


def events_naming(
    events: Iterable[dict[str, Any]], user_id: str, theirs: Collection[str]
) -> list[dict[str, Any]]:
    """The stored audit events (agentd.store.audit_chain.stored_event) concerning the person, each with
    the fields to erase for them under `erase`."""
    found = []
    for event in events:
        fields = audit_fields(event, user_id, theirs)
        if fields:
            found.append({**event, "erase": fields})
    return found


def document(
    conversations: list[dict[str, Any]],
    memories: Iterable[tuple[str, str, float, float]],
    facts: Iterable[tuple[str, str, float, str | None, float, float]],
    episodes: Iterable[tuple[int, str | None, str, float, float, str | None]],
    runs: list[dict[str, Any]],
    approvals: list[dict[str, Any]],
    events: list[dict[str, Any]],
    user_id: str,
    media: Iterable[tuple[str, str, str, str, str | None, int, float]] = (),
) -> dict[str, Any]:
    """One agent's part of a person's export (agentd.store.queries.PersonData)."""
    scope = partition_of(user_id)
    return {
        "conversations": conversations,
        "memories": [
            {"scope": scope, "key": k, "value": v, "created_at": c, "updated_at": u}
            for k, v, c, u in memories
        ],
        "facts": [
            {"key": k, "value": v, "confidence": c, "source": s, "created_at": ca, "updated_at": u}
            for k, v, c, s, ca, u in facts
        ],
        "episodes": [
            {"id": i, "conversation_key": k, "text": t, "created_at": c, "importance": imp, "embedder": e}
            for i, k, t, c, imp, e in episodes
        ],
        # the files they sent and those of their conversations (by hash, as their messages refer to them)
        "media": [
            {
                "conversation_key": k,
                "sha256": h,
                "kind": kind,
                "mime_type": m,
                "filename": f,
                "size": n,
                "created_at": c,
            }
            for k, h, kind, m, f, n, c in media
        ],
        "runs": runs,
        "approvals": approvals,
        "audit_events": [
            {k: e[k] for k in ("seq", "ts", "kind", "action", "conversation_key", "run_id", "data")}
            for e in events
        ],
    }


def layer_after_erasure(data: str, rebuild: Collection[str], drop: Collection[str]) -> str | None:
    """A shared thread's memory layer state after an erasure there: None to delete it (it holds text made
    from everyone's messages: the layer starts over), its JSON without `drop` keys, or unchanged."""
    state = json.loads(data)
    if any(k in state for k in rebuild):
        return None
    if any(k in state for k in drop):
        return json.dumps({k: v for k, v in state.items() if k not in drop}, separators=(",", ":"))
    return data


def _held_only(
    found: Mapping[str, list[str]], conversations: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """Their conversations (theirs, shared), only those the caller holds when it names them."""
    theirs, shared = found["theirs"], found["shared"]
    if conversations is None:
        return theirs, shared
    held = set(conversations)
    return [k for k in theirs if k in held], [k for k in shared if k in held]


def _closing(counts: Mapping[str, int], op: ErasePerson) -> tuple[dict[str, int], AuditRecord | None]:
    """What an erasure answers (the kinds of which something went) and the one audit event it leaves:
    counts, who asked, the subject, never the id (none when nothing went and no `record` was asked)."""
    erased = counts_of(counts)
    if not erased and op.record is None:
        return erased, None
    data = {"subject": dict(op.subject), "counts": erased, "by": op.by, **(op.record or {})}
    return erased, AuditRecord(EVENT_KIND, EVENT_ACTION, None, None, data)


# -- erasing: one flow, each backend's SQL behind it ------------------------------------------------


class ErasureSteps(Protocol):
    """What an erasure asks of a backend, all inside the erasing transaction (ErasePerson)."""

    def conversations(self, user_id: str) -> dict[str, list[str]]:
        """As PersonConversations answers."""
        ...

    def runs_in(self, user_id: str, shared: Sequence[str]) -> list[str]:
        """The runs their messages started in these shared conversations."""
        ...

    def drop_conversations(self, theirs: Sequence[str], runs: Sequence[str]) -> dict[str, int]:
        """Delete their conversations whole (threads, messages, summaries, memory states), the runs of
        those and `runs`, delivery ids of either; counts per kind."""
        ...

    def exchanges(self, user_id: str, shared: Sequence[str], runs: Sequence[str]) -> list[tuple[Any, ...]]:
        """Their messages and those of `runs` in shared conversations: (thread_id, conversation_key,
        status, seq, body, run_id, created_at), in conversation, thread and seq order."""
        ...

    def rewrite(self, messages: Sequence[tuple[int, int, str]]) -> None:
        """Store (thread_id, seq, body) as the messages' bodies, with no sender."""
        ...

    def drop_summaries(self, thread_id: int) -> int:
        """Delete the thread's compaction summaries; when there were, show its messages again and
        estimate what it weighs now (so it is compacted anew before its next turn when over)."""
        ...

    def layers(self, thread_id: int) -> list[tuple[str, str]]:
        """The thread's memory layer states: (layer, data JSON)."""
        ...

    def set_layer(self, thread_id: int, layer: str, data: str | None) -> None:
        """Replace a layer state's data, or delete it (None)."""
        ...

    def touched(self, thread_ids: Sequence[int]) -> None:
        """These threads changed other than by an append (a shared store moves their versions)."""
        ...

    def approvals(self) -> list[tuple[str, str, str, str, str, str, float]]:
        """Every approval: (id, conversation_key, tool, args JSON, requested_by, status, created_at)."""
        ...

    def drop_approvals(self, ids: Sequence[str]) -> None: ...

    def drop_partition(self, partition: str) -> dict[str, int]:
        """Delete the person's persistent memories, facts and episodes (their indexes with them)."""
        ...

    def drop_media(self, user_id: str, theirs: Sequence[str]) -> int:
        """Delete the files they sent anywhere, and every file of their conversations."""
        ...

    def events_naming(self, user_id: str, theirs: Sequence[str]) -> list[dict[str, Any]]:
        """As `events_naming` gives them, from this store's trail."""
        ...

    def rewrite_event(self, seq: int, erased: Erased) -> None: ...

    def append(self, record: AuditRecord, op: ErasePerson) -> None:
        """Append the erasure's own event to the trail."""
        ...


def erase(steps: ErasureSteps, op: ErasePerson) -> dict[str, int]:
    """The erasure ErasePerson describes, on any backend; returns the counts per kind erased."""
    user = op.user_id
    theirs, shared = _held_only(steps.conversations(user), op.conversations)
    runs = steps.runs_in(user, shared)
    counts = Counter(steps.drop_conversations(theirs, runs))
    counts.update(_tombstone(steps, user, shared, runs, op))
    approvals = their_approvals(steps.approvals(), user, set(theirs))
    steps.drop_approvals([a["id"] for a in approvals])
    counts["approvals"] = len(approvals)
    counts.update(steps.drop_partition(partition_of(user)))
    counts["media"] = steps.drop_media(user, theirs)
    events = steps.events_naming(user, theirs)
    for event in events:
        steps.rewrite_event(event["seq"], erase_fields(event, event["erase"]))
    counts["audit_events"] = len(events)
    erased, record = _closing(counts, op)
    if record is not None:
        steps.append(record, op)
    return erased


def _tombstone(
    steps: ErasureSteps, user: str, shared: Sequence[str], runs: Sequence[str], op: ErasePerson
) -> Counter[str]:
    """Their exchanges in shared conversations become tombstones; what those threads derived from
    everyone's messages is rebuilt without them (see ErasePerson)."""
    rows = steps.exchanges(user, shared, runs)
    steps.rewrite([(row[0], row[3], tombstone_body(row[4])) for row in rows])
    counts: Counter[str] = Counter({"tombstoned": len(rows)})
    threads = sorted({row[0] for row in rows})
    for thread_id in threads:
        counts["summaries"] += steps.drop_summaries(thread_id)
        for layer, data in steps.layers(thread_id):
            after = layer_after_erasure(data, op.rebuild_layers_holding, op.drop_layer_keys)
            if after != data:
                steps.set_layer(thread_id, layer, after)
                counts["memory_states"] += 1
    steps.touched(threads)
    return counts
