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
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart, dump_message, load_message
from agentd.store.audit_chain import DATA_PREFIX, KEY_FIELD
from agentd.store.records import AuditRecord

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
        if isinstance(part, TextPart):
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


def may_name(text: str | None, user_id: str) -> bool:
    """A cheap pre-filter over stored JSON text: could it name the person at all?"""
    return text is not None and json.dumps(user_id)[1:-1] in text


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


def erasure_event(
    subject: Mapping[str, Any], counts: Mapping[str, int], by: str, record: Mapping[str, Any] | None
) -> AuditRecord:
    """The one audit event an erasure leaves in a store: counts, who asked, the subject (never the id)."""
    data = {"subject": dict(subject), "counts": dict(counts), "by": by, **(record or {})}
    return AuditRecord(EVENT_KIND, EVENT_ACTION, None, None, data)
